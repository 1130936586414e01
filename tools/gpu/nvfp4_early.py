"""A W4A16 decode GEMV that asks for all of its weights before its wait, against ``kernel: mma``
and the Triton GEMV, each shape's tilings swept; one run. A diagnostic: measured slower than
``kernel: mma`` on every Qwen3-8B shape (docs/nvfp4.md, twenty-first session), so not in the plugin.

    python tools/gpu/nvfp4_early.py [--ms 1 8 16] [--shapes qkv down] [--iters 30]

The kernel (``nvfp4_gemv_early``): same contract and arithmetic as ``hinge_nvfp4.triton_gemv``
(its ``accumulate`` step, so the same sums in the same order as its unsplit tiling with
``block_k`` = this kernel's step; its private load helpers too), laid out for programmatic
dependent launch (PDL): one program owns ``block_n`` whole rows of W, and

1. lets the next kernel launch at its start (``gdc_launch_dependents``);
2. issues the loads of *every* code word and scale of its rows, K in ``block_k`` steps unrolled
   (no loop, no split), into registers;
3. only then waits for the kernel before it (``gdc_wait``), which wrote x;
4. loads x and does the arithmetic.

Why: a plain read of each shape's bytes launched that way (``read_ceiling.py --reads pdl``)
reached 83-92% of the H100's 3.35 TB/s in a CUDA graph, where the same read without PDL reached
54-84% and ``kernel: mma`` 46-78%. What it showed: with Triton's decode on the CUDA cores the
arithmetic after the wait costs more than the bytes (qkv at one row 10.3 us against mma's ~7).

Timed as ``nvfp4_gemm.py`` times kernels (``ROTATE`` weight copies in turn from one CUDA graph,
so HBM serves them; ``replay``: events around one replay, launch included; ``steady``: from while
one already runs). Percentages of the datasheet bandwidth over the weight's codes and scales.
Every early tiling is checked against ``kernel: mma``'s output of the same weight (bf16
tolerance) before it is timed. Printed per shape and M: mma, Triton's default GEMV, the best early
tiling launched early and the same tiling launched without PDL, then every tiling swept.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from nvfp4_gemm import (  # NOTE: the sibling script
    ROTATE,
    SHAPE_NAMES,
    graph_time,
    layers_of,
    shapes_of,
    start,
)

from hinge_nvfp4.triton_gemv import (
    MAX_ROWS,
    _load_step,
    _load_x,
    _weight_rows,
    accumulate,
    supports,
)

MAX_STEPS = 64


@dataclass(frozen=True)
class EarlyConfig:
    """One tiling: whole rows of W per program, K per step (a power of two >= 32, ``steps`` of
    them make K), warps, tensor cores or not (``dot``), and whether to launch with PDL (``early``;
    off: the same kernel waited for by the stream, for an A/B)."""

    block_n: int = 16
    block_k: int = 4096
    num_warps: int = 8
    dot: bool = False
    early: bool = True


@triton.jit
def _early_gemv_kernel(
    x_ptr, w_ptr, s_ptr, rs_ptr, bias_ptr, out_ptr,
    M, N, K, stride_xm, stride_wn, stride_sn, stride_om,
    HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, USE_DOT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STEPS: tl.constexpr, EARLY: tl.constexpr,
):
    if EARLY:
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may launch now
    GROUPS: tl.constexpr = BLOCK_K // 16
    offs_n, rows_n, w_rows, s_rows = _weight_rows(w_ptr, s_ptr, N, stride_wn, stride_sn, BLOCK_N)
    # every step's weights asked for before the wait (unrolled: nothing waits for a load before
    # the last one is issued)
    words, sbits = (), ()
    for i in tl.static_range(STEPS):
        w, sb, _ = _load_step(w_rows, s_rows, i * BLOCK_K, K, BLOCK_K, True)
        words, sbits = words + (w,), sbits + (sb,)
    if EARLY:
        tl.extra.cuda.gdc_wait()  # the kernel before this one (it wrote x) has finished
    offs_m = tl.arange(0, BLOCK_M)
    x_rows = x_ptr + tl.minimum(offs_m, M - 1)[:, None] * stride_xm
    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N, GROUPS), dtype=tl.float32)
    for i in tl.static_range(STEPS):
        x = _load_x(x_rows, i * BLOCK_K, K, BLOCK_K, True)
        acc = accumulate(acc, x, words[i], sbits[i], USE_DOT, IEEE)
    if not USE_DOT:
        acc = tl.sum(acc, axis=2)
    acc = acc * tl.load(rs_ptr + rows_n)[None, :]
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + rows_n).to(tl.float32)[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)


def steps_for(k: int, config: EarlyConfig) -> int:
    """How many ``block_k`` steps make K; a ``ValueError`` naming the fix where none do."""
    steps = k // config.block_k
    if (config.block_k < 32 or config.block_k & (config.block_k - 1) or steps * config.block_k != k
            or not 1 <= steps <= MAX_STEPS):
        raise ValueError(
            f"EarlyConfig.block_k = {config.block_k} does not split K = {k} into 1..{MAX_STEPS} "
            f"equal power-of-two steps; pick a block_k that is a power of two dividing K")
    return steps


def nvfp4_gemv_early(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                     row_scale: torch.Tensor, bias: torch.Tensor | None, *,
                     config: EarlyConfig | None = None,
                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x (M <= 16, K), packed (N, K/2) uint8, scales (N, K/16) fp8, row_scale (N,) float32 ->
    (M, N) in ``out_dtype`` (x's by default), launched early (PDL) unless ``config.early`` is off."""
    cfg = config or EarlyConfig()
    if not supports(x, packed):
        raise ValueError(
            f"nvfp4_gemv_early takes what triton_gemv.supports does (x of 1..{MAX_ROWS} rows); got x "
            f"{tuple(x.shape)} {x.dtype}, packed {tuple(packed.shape)} {packed.dtype}")
    m, k = x.shape
    n = packed.shape[0]
    steps = steps_for(k, cfg)
    words = packed.view(torch.int32)
    sbits = scales.view(torch.uint8)
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    extra = {"launch_pdl": True} if cfg.early else {}
    _early_gemv_kernel[(triton.cdiv(n, cfg.block_n),)](
        x, words, sbits, row_scale, bias if bias is not None else row_scale, out,
        m, n, k, x.stride(0), words.stride(0), sbits.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32, USE_DOT=cfg.dot,
        BLOCK_M=16 if cfg.dot else max(1, triton.next_power_of_2(m)), BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, STEPS=steps, EARLY=cfg.early, num_warps=cfg.num_warps, **extra)
    return out


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
    return lambda i=0: nvfp4_gemv_early(x, quant[i][0], quant[i][1], ones, None, config=cfg)


def pct(t: float, roof: float) -> str:
    return f"{t:6.1f} ({100 * roof / t:3.0f}%)"


def shape_rows(args, kernel, name: str, n: int, k: int) -> list:
    """Each M's row of the table for one shape, every swept tiling printed as it is timed."""
    from hinge_nvfp4 import format as fp4

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
    for label, (n, k) in shapes_of(args.shapes):
        rows += shape_rows(args, kernel, label.split()[0], n, k)
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
    parser.add_argument("--shapes", nargs="+", choices=SHAPE_NAMES)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--hbm-tbs", type=float, default=None)
    args = parser.parse_args()
    args.hbm_tbs = start(args.hbm_tbs, f"; us a call (% of {{hbm}} TB/s), {ROTATE} copies in turn from one graph")
    main(args)
