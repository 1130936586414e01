"""The in-pool decode kernels alone (the gated delta rule, then the conv): us per layer and their
share of the copy bandwidth.

Qwen3.5-9B head sizes (16 key heads, 32 value heads, 128 x 128 float32 states: 2 MiB per
request per layer), one token per request, each layer's states in their own pool slots so
that they come from HBM rather than L2, the layers captured in one CUDA graph. Bytes per layer
are the states read and written (``2 * B * Hv * Dk * Dv * 4``), the same count the copy
bandwidth makes of a copy (read + write). Needs only torch and triton (no gpu-host pack).

    python tools/gpu/recurrent_decode.py            # a markdown table
    python tools/gpu/recurrent_decode.py --batch 64 128
    python tools/gpu/recurrent_decode.py --sweep     # and (BV, warps) tilings at batch 16 and 64
"""

from __future__ import annotations

import argparse

import torch
from fa4_attention import copy_gbps, cuda_ms, graphed  # NOTE: the sibling script

from hinge.layers.recurrent_kernels.conv_in_pool import BLOCK_C, conv_in_pool
from hinge.layers.recurrent_kernels.decode_in_pool import DEFAULT_MODE_TILE, decode_in_pool

HK, HV, DK, DV = 16, 32, 128, 128
CONV_C, CONV_K = 2 * HK * DK + HV * DV, 4  #: the DeltaNet's conv channels and taps
L2_BYTES = 60 << 20


def row(b: int, copy: float, tile: tuple[int, int] | None = None) -> dict:
    per_layer = 2 * b * HV * DK * DV * 4
    layers = max(4, -(-4 * L2_BYTES // per_layer))
    gen = torch.Generator(device="cuda").manual_seed(b)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    q, k = rand(b, HK, DK).bfloat16(), rand(b, HK, DK).bfloat16()
    v = rand(b, HV, DV).bfloat16()
    g = torch.nn.functional.logsigmoid(rand(b, HV) + 3.0)
    beta = torch.sigmoid(rand(b, HV)).bfloat16()
    pool = rand(1 + layers * b, HV, DK, DV) * 0.1
    slots = [torch.arange(1 + i * b, 1 + (i + 1) * b, device="cuda") for i in range(layers)]
    prefix = torch.ones(b, dtype=torch.int64, device="cuda")

    def step() -> None:
        for s in slots:  # each layer reads and writes its own slots, as the engine's layers do
            decode_in_pool(q, k, v, g, beta, pool, s, s, prefix, tile=tile)

    ms = cuda_ms(graphed(step)) / layers
    gbps = per_layer / ms / 1e6
    return {"batch": b, "tile": tile, "us_per_layer": ms * 1e3, "gbps": gbps, "of_copy": gbps / copy}


def conv_row(b: int, copy: float, tile: tuple[int, int] | None = None) -> dict:
    """The in-pool decode conv (``conv_in_pool``): bytes per layer = the windows read and written
    plus the input and output rows, bf16."""
    per_layer = 2 * (2 * b * CONV_C * (CONV_K - 1) + 2 * b * CONV_C)
    layers = max(4, -(-4 * L2_BYTES // per_layer))
    gen = torch.Generator(device="cuda").manual_seed(b)
    x = torch.randn(b, CONV_C, generator=gen, device="cuda").bfloat16()
    weight = torch.randn(CONV_C, CONV_K, generator=gen, device="cuda").bfloat16()
    pool = torch.randn(1 + layers * b, CONV_C, CONV_K - 1, generator=gen, device="cuda").bfloat16()
    slots = [torch.arange(1 + i * b, 1 + (i + 1) * b, device="cuda") for i in range(layers)]
    prefix = torch.ones(b, dtype=torch.int64, device="cuda")
    block, warps = tile or (BLOCK_C, 4)

    def step() -> None:
        for s in slots:
            conv_in_pool(x, weight, None, pool, s, s, prefix, activation="silu", block_c=block,
                         num_warps=warps)

    ms = cuda_ms(graphed(step)) / layers
    gbps = per_layer / ms / 1e6
    return {"batch": b, "tile": tile, "us_per_layer": ms * 1e3, "gbps": gbps, "of_copy": gbps / copy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 128])
    parser.add_argument("--sweep", action="store_true",
                        help="also other tilings (value columns a program, warps) at batch 16 and 64")
    args = parser.parse_args()
    copy = copy_gbps()
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s\n")
    print("| batch | tiling (BV, warps) | us/layer | GB/s | of copy |\n| --- | --- | --- | --- | --- |")
    # deterministic mode's tiling (None: (8, 1)) and default mode's at every batch size
    runs = [(b, tile) for tile in (None, DEFAULT_MODE_TILE) for b in args.batch]
    if args.sweep:  # other tilings: bits may differ
        runs += [(b, (bv, w)) for b in (16, 64) for bv in (8, 16, 32, 64) for w in (1, 2, 4)
                 if (bv, w) not in ((8, 1), DEFAULT_MODE_TILE)]
    names = {None: "(8, 1) deterministic", DEFAULT_MODE_TILE: f"{DEFAULT_MODE_TILE} default mode"}
    for b, tile in runs:
        r = row(b, copy, tile)
        print(f"| {b} | {names.get(tile, tile)} | {r['us_per_layer']:.1f} | {r['gbps']:.0f} | "
              f"{r['of_copy']:.0%} |")
    print(f"\nthe in-pool conv ({CONV_C} channels, {CONV_K} taps, bf16 windows; any tiling: the "
          "same bits)\n| batch | tiling (channels, warps) | us/layer | GB/s | of copy |\n"
          "| --- | --- | --- | --- | --- |")
    conv_runs = [(b, None) for b in args.batch]
    if args.sweep:
        conv_runs += [(b, (c, w)) for b in (16, 64) for c in (128, 256, 512, 1024)
                      for w in (1, 2, 4, 8) if (c, w) != (BLOCK_C, 4)]
    for b, tile in conv_runs:
        r = conv_row(b, copy, tile)
        print(f"| {b} | {tile or (BLOCK_C, 4)} | {r['us_per_layer']:.1f} | {r['gbps']:.0f} | "
              f"{r['of_copy']:.0%} |")


if __name__ == "__main__":
    main()
