"""The weight dequantized for prefill sizes: ``triton_gemm.dequantize_weight`` (from the
checkpoint's codes) against ``MmaGemv.dequantize``'s forms (from kernel: mma's repack), on the
Qwen3-8B shapes; one run, bits checked equal first.

    python tools/gpu/nvfp4_dequant.py [--iters 50]

Each timing replays a CUDA graph over ``nvfp4_gemm.ROTATE`` copies of the weight (read from
HBM); bytes = codes + scales read + the bf16 weight written; % of the peak HBM bandwidth.
"""

from __future__ import annotations

import argparse

import torch
from nvfp4_gemm import ROTATE, SHAPES, graph_time, peak_hbm_tbs  # NOTE: the sibling script


def shape_times(gemv, n: int, k: int, iters: int) -> list[float]:
    """us a weight: the Triton dequantization, then each of ``MmaGemv.dequantize``'s forms (their
    bits checked equal to the Triton one's first)."""
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4 import mma_gemv, mma_layout
    from hinge_nvfp4.triton_gemm import dequantize_weight

    quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(ROTATE)]
    row_scale = torch.rand(n, device="cuda") + 0.5
    repacks = [mma_layout.repack(packed, scales) for packed, scales, _ in quant]
    out = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
    want = dequantize_weight(quant[0][0], quant[0][1], row_scale, torch.empty_like(out))
    for form in mma_gemv.DEQUANTS:
        got = gemv.dequantize(*repacks[0], row_scale, torch.full_like(out, float("nan")), form=form)
        assert torch.equal(got, want), (n, k, form)
    times = [graph_time(lambda i=0: dequantize_weight(quant[i][0], quant[i][1], row_scale, out), iters)]
    return times + [graph_time(lambda i=0, f=form: gemv.dequantize(*repacks[i], row_scale, out, form=f), iters)
                    for form in mma_gemv.DEQUANTS]


def main(iters: int) -> None:
    from hinge_nvfp4 import mma_gemv

    peak = peak_hbm_tbs()
    major, minor = torch.cuda.get_device_capability()
    gemv = mma_gemv.MmaGemv(mma_gemv.cached_cubin(f"sm_{major}{minor}", 4), "plain", 4)
    print(f"{torch.cuda.get_device_name()}, peak {peak} TB/s; us (% of peak) a weight")
    print(f"{'shape':22} {'MB moved':>9} {'triton':>14} " + " ".join(f"{f:>14}" for f in mma_gemv.DEQUANTS))
    for label, (n, k) in SHAPES.items():
        moved = n * k // 2 + n * k // 16 + 2 * n * k
        cells = " ".join(f"{t:>7.1f} ({100 * moved / (peak * 1e6 * t):>3.0f}%)" for t in shape_times(gemv, n, k, iters))
        print(f"{label:22} {moved / 1e6:>9.1f} {cells}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    main(parser.parse_args().iters)
