"""What reading an NVFP4 weight's bytes takes at all, next to kernel: mma's GEMV; one run.

    python tools/gpu/read_ceiling.py [--iters 30] [--replays 4] [--reads plain pdl pdl-wait-first]
        [--shapes qkv ...] [--every]

The GEMV goal is 70% of the datasheet bandwidth at M <= 16 on Qwen3-8B's qkv, gate_up and down
(14.2, 56.6 and 28.3 MB of codes and scales). For each shape's bytes this times, as
``nvfp4_gemm.py`` times kernels (``ROTATE`` copies in turn from one CUDA graph, so HBM serves
them; both clocks: ``replay`` events around one replay, ``steady`` from while one runs):

- ``read``: the fastest of a sweep of plain streaming reads (Triton: each program loads
  ``ITERS`` x ``BLOCK`` int32 words, all loads before the sum; grids of 1/2 to 64 programs a
  multiprocessor), the bytes and nothing else;
- ``pdl``: the same sweep launched as the GEMVs are (programmatic dependent launch): each
  program lets the next read launch at its start, issues its loads, and only then waits for the
  read before it (where a GEMV waits for its x), so one read's loads overlap the last one's tail;
  ``pdl-wait-first`` (``--reads``): launched early, but waiting before its first load;
- ``cuBLAS bf16``: torch's bf16 GEMV (M = 1) over a weight of the same bytes (K = 4096 or the
  shape's, N to match), what NVIDIA's library reaches at that size;
- ``mma``: kernel: mma's call as the engine makes it, M = 1 (the shipped tilings).
"""

from __future__ import annotations

import argparse

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

#: how a read is launched: ``plain`` without PDL; ``pdl`` early, its loads before its wait (as a
#: GEMV's weights before its x); ``pdl-wait-first`` early, but waiting before any load (what the
#: early launch alone is worth, the loads not overlapping the kernel before)
WAITS = {"plain": 0, "pdl": 2, "pdl-wait-first": 1}


@triton.jit
def read_words(src, out, n_words, BLOCK: tl.constexpr, ITERS: tl.constexpr, WAIT: tl.constexpr):
    if WAIT > 0:
        tl.extra.cuda.gdc_launch_dependents()  # the next read may launch now
    if WAIT == 1:
        tl.extra.cuda.gdc_wait()
    base = tl.program_id(0) * BLOCK * ITERS
    total = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        total += tl.load(src + offs, mask=offs < n_words, other=0, cache_modifier=".cg")
    if WAIT == 2:
        tl.extra.cuda.gdc_wait()  # where a GEMV waits for its x: after its weights' loads
    tl.store(out + tl.program_id(0), tl.sum(total, 0))


def best_read(n_bytes: int, iters: int, replays: int, kind: str = "plain", every: bool = False) -> tuple:
    """The fastest read of the sweep (us, how); ``every``: each one printed as it is timed."""
    words = n_bytes // 4
    bufs = [torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device="cuda") for _ in range(ROTATE)]
    out = torch.empty(words // 256 + 1, dtype=torch.int32, device="cuda")
    best = (float("inf"), None)
    for block in (512, 1024, 2048):
        for its in (1, 2, 4, 8, 16):
            for warps in (4, 8):
                grid = (triton.cdiv(words, block * its),)

                def fn(i=0, block=block, its=its, warps=warps, grid=grid):
                    read_words[grid](bufs[i], out, words, BLOCK=block, ITERS=its, WAIT=WAITS[kind],
                                     launch_pdl=kind != "plain", num_warps=warps)

                t = graph_time(fn, iters, replays)
                if every:
                    print(f"    {kind} {n_bytes / 1e6:.1f} MB {'steady' if replays else 'replay'}: "
                          f"{block * its * 4 // 1024} KiB a program ({block} x {its}), {warps} warps, "
                          f"{grid[0]} programs: {t:.2f} us", flush=True)
                if t < best[0]:
                    best = (t, f"block {block} x {its}, {warps} warps, {grid[0]} programs")
    return best


def main(args) -> None:
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.options import NVFP4Options

    kernel = MmaKernel(dequant_rows=NVFP4Options().prefill_dequant_rows)
    heads = "".join(f" {kind + ' us (%)':>16}" for kind in args.reads)
    print(f"{'shape':8} {'MB':>5} {'clock':7}{heads} {'cuBLAS bf16 us (%)':>19} {'mma us (%)':>14}  best read(s)")
    for label, (n, k) in shapes_of(args.shapes):
        n_bytes = n * k // 2 + n * k // 16
        roof = n_bytes / (args.hbm_tbs * 1e12) * 1e6
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
        layers = layers_of(kernel, [fp4.quantize_weight(w) for w in ws], n)
        del ws
        same = [torch.randn(n_bytes // (2 * k) // 16 * 16, k, device="cuda", dtype=torch.bfloat16)
                for _ in range(ROTATE)]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        for clock, replays in (("replay", 0), ("steady", args.replays)):
            reads = [best_read(n_bytes, args.iters, replays, kind, args.every) for kind in args.reads]
            dense = graph_time(lambda i=0, x=x, same=same: torch.nn.functional.linear(x, same[i]),
                               args.iters, replays)
            dense_roof = same[0].numel() * 2 / (args.hbm_tbs * 1e12) * 1e6
            mma = graph_time(lambda i=0, x=x, layers=layers: kernel.linear(layers[i], x, None, None),
                             args.iters, replays)
            cells = "".join(f" {t:9.1f} ({100 * roof / t:3.0f}%)" for t, _ in reads)
            print(f"{label.split()[0]:8} {n_bytes / 1e6:5.1f} {clock:7}{cells} "
                  f"{dense:11.1f} ({100 * dense_roof / dense:3.0f}%) {mma:7.1f} ({100 * roof / mma:3.0f}%)  "
                  + "; ".join(how for _, how in reads), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--hbm-tbs", type=float, default=None)
    parser.add_argument("--reads", nargs="+", choices=tuple(WAITS), default=["plain", "pdl"])
    parser.add_argument("--every", action="store_true", help="print every read of the sweeps")
    parser.add_argument("--shapes", nargs="+", choices=SHAPE_NAMES,
                        help="these shapes alone (default every one)")
    args = parser.parse_args()
    args.hbm_tbs = start(args.hbm_tbs, f"; us a call (% of {{hbm}} TB/s), {ROTATE} copies in turn from one graph")
    main(args)
