"""Launch the decode GEMVs once each at the Qwen3-8B shapes, for Nsight Compute to profile.

    ncu --clock-control none --kernel-name regex:gemv_kernel --launch-skip 3 \\
        --section SpeedOfLight --section WarpStateStats python3 tools/gpu/ncu_gemv.py nvfp4 gate_up

The first argument picks the kernel (``nvfp4``: ``hinge_nvfp4.triton_gemv``; ``bf16``:
``hinge.layers.fast_triton.gemv``; ``mma``: ``hinge_nvfp4.mma_gemv`` as ``kernel: mma`` runs it,
``--layout`` its memory order; ncu's ``--kernel-name nvfp4_mma_gemv``), the second the shape
(qkv, o, gate_up, down), ``--m`` the rows.
Three warm-up launches (compile, caches), then one more: ``--launch-skip 3 --launch-count 1``
profiles the fourth, whose weights are a fresh copy (not in L2).
"""

from __future__ import annotations

import argparse

import torch

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernel", choices=("nvfp4", "bf16", "mma"))
    ap.add_argument("shape", choices=list(SHAPES))
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--layout", choices=("tile", "super", "interleaved"), default="tile")
    args = ap.parse_args()
    n, k = SHAPES[args.shape]
    x = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16)
    if args.kernel == "bf16":
        from hinge.layers.fast_triton.gemv import gemv

        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        calls = [lambda w=w: gemv(x, w) for w in ws]
    elif args.kernel == "mma":
        from hinge_nvfp4 import format as fp4
        from hinge_nvfp4 import mma_tiling
        from hinge_nvfp4.kernels import MmaKernel

        kernel = MmaKernel(layout=args.layout)
        layers = []
        for _ in range(4):
            packed, scales, row_scale = fp4.quantize_weight(torch.randn(n, k, device="cuda",
                                                                        dtype=torch.bfloat16))
            layer = torch.nn.Module()
            layer.row_scale = torch.ones(n, device="cuda")
            kernel.prepare_linear(layer, packed, scales)
            layers.append(layer)
        print(f"tiling {mma_tiling.tiling(n, k, kernel._num_sms, mma_tiling.tuned_tilings())}")
        calls = [lambda layer=layer: kernel.linear(layer, x, None, None) for layer in layers]
    else:
        from hinge_nvfp4 import format as fp4
        from hinge_nvfp4.triton_gemv import nvfp4_gemv

        row_scale = torch.ones(n, device="cuda")
        quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
                 for _ in range(4)]
        calls = [lambda q=q: nvfp4_gemv(x, q[0], q[1], row_scale, None) for q in quant]
    for call in calls:
        call()
    torch.cuda.synchronize()
    print(f"{args.kernel} {args.shape} {n}x{k} m={args.m}: 4 launches")


if __name__ == "__main__":
    main()
