"""The GEMV that asks for all of its weights before its wait (``triton_gemv_early``) against
``kernel: mma`` and the Triton GEMV, each shape's tilings swept; one run.

    python tools/gpu/nvfp4_early.py [--ms 1 8 16] [--shapes qkv down] [--iters 30]

Timed as ``nvfp4_gemm.py`` times kernels (``ROTATE`` weight copies in turn from one CUDA graph,
so HBM serves them; ``replay``: events around one replay, launch included; ``steady``: from while
one already runs). Percentages of the datasheet bandwidth over the weight's codes and scales (the
goal's roofline: 70% at M <= 16). Every early tiling is checked against ``kernel: mma``'s output
of the same weight (bf16 tolerance) before it is timed.
Printed per shape and M: mma, Triton's default GEMV, the best early tiling launched early and the
same tiling launched without PDL (what the early launch is worth), then every tiling swept.
"""

from __future__ import annotations

import argparse

import torch
from nvfp4_gemm import ROTATE, SHAPES, graph_time, layers_of, start  # NOTE: the sibling script


def tilings(m: int, k: int) -> list:
    """(block_n, block_k, warps, dot) to sweep: CUDA cores for one or two rows, ``tl.dot`` with
    short K steps above (longer ones spill: docs/nvfp4.md)."""
    if m <= 2:
        return [(bn, bk, w, False) for bn in (4, 8, 16) for bk in (2048, 4096) for w in (4, 8)
                if bk <= k and not (bn == 16 and w == 4)]
    return [(bn, 256, w, True) for bn, w in ((16, 4), (32, 8), (64, 8))]


def mma_call(kernel, layers, x):
    return lambda i=0: kernel.linear(layers[i], x, None, None)


def triton_call(quant, ones, x):
    from hinge_nvfp4.triton_gemm import nvfp4_linear

    return lambda i=0: nvfp4_linear(x, quant[i][0], quant[i][1], ones, None)


def early_call(quant, ones, x, cfg):
    from hinge_nvfp4.triton_gemv_early import nvfp4_gemv_early

    return lambda i=0: nvfp4_gemv_early(x, quant[i][0], quant[i][1], ones, None, config=cfg)


def pct(t: float, roof: float) -> str:
    return f"{t:6.1f} ({100 * roof / t:3.0f}%)"


def shape_rows(args, kernel, name: str, n: int, k: int) -> list:
    """Each M's row of the table for one shape, every swept tiling printed as it is timed."""
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.triton_gemv_early import EarlyConfig

    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
    quant = [fp4.quantize_weight(w) for w in ws]
    del ws
    layers = layers_of(kernel, quant, n)
    ones = torch.ones(n, device="cuda")
    roof = (n * k // 2 + n * k // 16) / (args.hbm_tbs * 1e12) * 1e6
    rows = []
    for m in args.ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        want = mma_call(kernel, layers, x)().float()
        swept = []
        for bn, bk, w, dot in tilings(m, k):
            cfg = EarlyConfig(block_n=bn, block_k=bk, num_warps=w, dot=dot)
            fn = early_call(quant, ones, x, cfg)
            err = float((fn().float() - want).abs().max() / want.abs().max())
            if err > 2e-2:
                print(f"WRONG {name} M={m} {cfg}: max rel err {err:.3g}", flush=True)
                continue
            swept.append((graph_time(fn, args.iters), graph_time(fn, args.iters, args.replays), cfg))
            print(f"  {name} M={m} n{bn} k{bk} w{w}{' dot' if dot else ''}: {pct(swept[-1][0], roof)} "
                  f"steady {swept[-1][1]:.1f}", flush=True)
        if not swept:
            continue
        best = min(swept, key=lambda s: s[0])
        late = early_call(quant, ones, x, EarlyConfig(**{**best[2].__dict__, "early": False}))
        mma = mma_call(kernel, layers, x)
        rows.append((name, m, graph_time(mma, args.iters), graph_time(mma, args.iters, args.replays),
                     graph_time(triton_call(quant, ones, x), args.iters), best,
                     graph_time(late, args.iters), roof))
    return rows


def main(args) -> None:
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.options import NVFP4Options

    kernel = MmaKernel(dequant_rows=NVFP4Options().prefill_dequant_rows)
    rows = []
    for label, (n, k) in SHAPES.items():
        name = label.split()[0]
        if not args.shapes or name in args.shapes:
            rows += shape_rows(args, kernel, name, n, k)
    print("\n| shape | M | mma us (%) | mma steady | triton us (%) | early us (%) | early steady | "
          "same tiling, no PDL | early tiling |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, m, mma, mma_s, tri, best, late, roof in rows:
        t, ts, cfg = best
        print(f"| {name} | {m} | {pct(mma, roof)} | {pct(mma_s, roof)} | {pct(tri, roof)} | "
              f"**{pct(t, roof)}** | {pct(ts, roof)} | {pct(late, roof)} | n{cfg.block_n} k{cfg.block_k} "
              f"w{cfg.num_warps}{' dot' if cfg.dot else ''} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--shapes", nargs="+", choices=[label.split()[0] for label in SHAPES])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--hbm-tbs", type=float, default=None)
    args = parser.parse_args()
    args.hbm_tbs = start(args.hbm_tbs, f"; us a call (% of {{hbm}} TB/s), {ROTATE} copies in turn from one graph")
    main(args)
