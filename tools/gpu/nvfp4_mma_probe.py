"""The tensor-core NVFP4 GEMV (``hinge_nvfp4/mma_gemv.cu``) on a GPU: its
outputs against the dequantized reference, and its time against hinge_nvfp4's Triton GEMV and the
bytes-moved roofline, for the Qwen3-8B layer shapes at M = 1, 2, 4, 8; one run.

    python3 tools/gpu/nvfp4_mma_probe.py [--iters 100] [--splits 1 2 4 8] [--stages 3 4 8 12 16]
                                         [--warps 4] [--hbm-tbs 4.8]

Needs nvcc on PATH (the kernel is compiled at start, ~1 s). Timing as ``nvfp4_gemm.py``'s: a CUDA
graph of ``ROTATE`` calls over as many weight copies (from HBM, not L2), the median of
``--iters`` replays. The async kernel's time is its launch alone (it adds its K splits itself,
the last warp of a tile to finish, and its epilogue applies the per-tensor scale and writes
bf16); the sync kernel's adds torch's sum over the splits and the bf16 cast: each comparable
with the Triton GEMV's whole call. Every
variant is timed: the register-load kernel ("sync") and the cp.async ring kernel at each of
``--stages``, each at every ``--splits``; printed per shape and M: the largest error of any
variant against the reference, the Triton GEMV's time, the best sync and best async variant
(microseconds, % of the roofline).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvfp4_gemm import ROTATE, SHAPES, graph_time  # noqa: E402 - the sibling script

from hinge_nvfp4 import mma_gemv as nvfp4_mma  # noqa: E402


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--stages", type=int, nargs="+", default=[3, 4, 8, 12, 16],
                        help="ring depths of the cp.async kernel (steps of four groups a warp)")
    parser.add_argument("--warps", type=int, default=4, help="warps (16-row tiles) a block")
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hbm-tbs", type=float, default=4.8)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.triton_gemv import nvfp4_gemv

    cubins = {st: nvfp4_mma.build_cubin("sm_90", stages=st) for st in args.stages}
    kernels = {"sync": nvfp4_mma.MmaGemv(cubins[args.stages[0]], warps=args.warps)}
    kernels |= {f"async {st}": nvfp4_mma.MmaGemv(c, warps=args.warps, kernel=nvfp4_mma.KERNELS[1])
                for st, c in cubins.items()}
    print(f"{torch.cuda.get_device_name()}; MMA GEMV vs hinge_nvfp4's Triton GEMV, us (median)")
    print("| shape | M | max rel err of the bf16 output (any variant) | Triton us (%) | sync MMA us (splits, %) | "
          "async MMA us (stages, splits, %) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, (n, k) in SHAPES.items():
        quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
                 for _ in range(ROTATE)]
        words = [nvfp4_mma.repack_codes(q[0]) for q in quant]
        sbits = [q[1].view(torch.uint8) for q in quant]
        ones = torch.ones(n, device="cuda")
        ref_w = fp4.dequantize(quant[0][0], quant[0][1], 1.0)
        for m in args.ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            roof = (n * k // 2 + n * k // 16 + 2 * m * (k + n)) / (args.hbm_tbs * 1e12) * 1e6
            want = x.float() @ ref_w.t()
            best, worst = {}, 0.0  # the fastest of each kind; the largest error of any variant
            for variant, gemv in kernels.items():
                for splits in args.splits:
                    groups = k // 16
                    per_split = ceil_div(ceil_div(groups, splits), 4) * 4  # whole steps
                    count = -(-groups // per_split)
                    fused = variant != "sync"  # the async kernel adds its splits itself
                    part = torch.empty(count, m, n, device="cuda") if count > 1 or not fused else None
                    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                    gemv.reserve_counters(n // 16, torch.device("cuda"))

                    def run(i=0, part=part, out=out, per_split=per_split, x=x, words=words,
                            sbits=sbits, gemv=gemv, fused=fused, ones=ones):
                        if fused:
                            return gemv(words[i], sbits[i], x, part, per_split, row_scale=ones,
                                        out=out).float()
                        gemv(words[i], sbits[i], x, part, per_split)
                        return part.sum(0).to(torch.bfloat16).float()

                    got = run()
                    torch.cuda.synchronize()
                    worst = max(worst, ((got - want).abs().max() / want.abs().max()).item())
                    us = graph_time(run, args.iters)
                    kind = variant.split()[0]
                    if kind not in best or us < best[kind][0]:
                        best[kind] = (us, f"{variant.split()[-1] + ', ' if kind == 'async' else ''}{count}")
            triton_us = graph_time(lambda i=0, x=x, q=quant, rs=ones: nvfp4_gemv(
                x, q[i][0], q[i][1], rs, None), args.iters)
            cells = [f"{us:.1f} ({what}, {100 * roof / us:.0f}%)" for us, what in
                     (best["sync"], best["async"])]
            print(f"| {label} | {m} | {worst:.2e} | {triton_us:.1f} ({100 * roof / triton_us:.0f}%) | "
                  f"{cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
