"""nvfp4 kernel ``mma``'s SwiGLU MLP at batch 1, gated (silu_mul in gate_up's epilogue) or not.

Builds ``--distinct`` Qwen3-8B MLPs (hidden 4096, intermediate 12288: more bytes than L2 holds)
from the same NVFP4 weights paired and gated, and as ``HINGE_NVFP4_MMA_GATED=0`` builds them,
each with and without early launches (``HINGE_PDL``), captures ``--layers`` MLP calls (the
distinct ones in turn, each one's output the next one's input; with or without the decoder's
add_rmsnorm between them) in one CUDA graph per variant, and replays the variants in turn for
``--rounds`` rounds. Prints the median us a layer of each variant: the MLP gated or not, with
early launches, without, or with down (gate_up) launched only after the kernel before it ends;
and gate_up alone, paired, gated, or followed by silu_mul (the epilogue's cost by itself).

    python tools/gpu/gated_mlp.py --layers 36 --distinct 4
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from hinge.layers.fast_triton.add_rmsnorm import add_rmsnorm
from hinge.layers.fast_triton.silu_mul import silu_mul
from hinge.layers.mlp import GatedMLP
from hinge.plugins import BuildContext
from hinge.testing import load_linear
from hinge_nvfp4 import format as fp4
from hinge_nvfp4.options import NVFP4Options
from hinge_nvfp4.quantizer import NVFP4Quantizer


def quantizer(gated: bool, pdl: bool = True) -> NVFP4Quantizer:
    os.environ["HINGE_NVFP4_MMA_GATED"] = "1" if gated else "0"  # read when the kernel is built
    pdl_env(pdl)
    ctx = BuildContext(device="cuda", dtype=torch.bfloat16, deterministic=False, page_size=16)
    return NVFP4Quantizer(NVFP4Options(kernel="mma"), ctx)


def pdl_env(pdl: bool) -> None:
    # hinge.devices.early_dependents reads it as kernels are built and Triton's are launched
    os.environ["HINGE_PDL"] = "1" if pdl else "0"


def shards(hidden: int, inter: int, seed: int) -> list[list[dict]]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for k, sizes in ((hidden, (inter, inter)), (inter, (hidden,))):
        parts = []
        for size in sizes:
            w = torch.randn(size, k, generator=gen, device="cuda") / k**0.5
            packed, scales, scale_2 = fp4.quantize_weight(w.to(torch.bfloat16))
            parts.append({"weight": packed, "weight_scale": scales, "weight_scale_2": scale_2,
                          "input_scale": fp4.global_scale(torch.tensor(4.0, device="cuda"))})
        out.append(parts)
    return out


def mlp(q: NVFP4Quantizer, weights: list[list[dict]], hidden: int, inter: int) -> GatedMLP:
    with torch.device("cuda"):
        m = GatedMLP(hidden, inter, "silu", q, torch.bfloat16, "mlp")
    load_linear(m.gate_up_proj, weights[0])
    load_linear(m.down_proj, weights[1])
    return m


def graphed(fn, x: torch.Tensor) -> torch.cuda.CUDAGraph:
    for _ in range(2):
        fn(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x)
    return graph


def timed(graph: torch.cuda.CUDAGraph, layers: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(10):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / 10 / layers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--distinct", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=12288)
    args = ap.parse_args()
    weights = [shards(args.hidden, args.inter, seed) for seed in range(args.distinct)]
    gated_q, plain_q = quantizer(True), quantizer(False)
    gated = [mlp(gated_q, w, args.hidden, args.inter) for w in weights]
    plain = [mlp(plain_q, w, args.hidden, args.inter) for w in weights]
    gated_q.kernel.early_after_gated = True  # down as its nvfp4_mma_early flag says (below)
    gated_serial = [mlp(quantizer(True, pdl=False), w, args.hidden, args.inter) for w in weights]
    plain_serial = [mlp(quantizer(False, pdl=False), w, args.hidden, args.inter) for w in weights]
    assert gated[0].gate_up_proj.nvfp4_mma_pairs and not plain[0].gate_up_proj.nvfp4_mma_pairs
    x = torch.randn(1, args.hidden, dtype=torch.bfloat16, device="cuda")

    norm_w = torch.ones(args.hidden, dtype=torch.bfloat16, device="cuda")

    def chain(mlps, step, norm=False):
        def run(x0):
            y, residual = x0, torch.zeros_like(x0)
            for i in range(args.layers):
                if norm:  # the decoder's add_rmsnorm between the MLPs (it lets the GEMV launch early)
                    y, residual = add_rmsnorm(y, residual, norm_w, 1e-6)
                y = step(mlps[i % len(mlps)], y)
            return y
        return run

    def mlp_step(m, y):
        return m(y)

    # name: (calls, early launches at all, down launched early, gate_up launched early)
    variants = {
        "MLP, gated GEMV": (chain(gated, mlp_step), True, True, True),
        "MLP, GEMV + silu_mul": (chain(plain, mlp_step), True, True, True),
        "MLP, gated GEMV, HINGE_PDL=0": (chain(gated_serial, mlp_step), False, True, True),
        "MLP, GEMV + silu_mul, HINGE_PDL=0": (chain(plain_serial, mlp_step), False, True, True),
        "MLP, gated GEMV, down after it": (chain(gated, mlp_step), True, False, True),
        "MLP, gated GEMV, gate_up after down": (chain(gated, mlp_step), True, True, False),
        "norm + MLP, gated GEMV": (chain(gated, mlp_step, True), True, True, True),
        "norm + MLP, gated GEMV, down after it": (chain(gated, mlp_step, True), True, False, True),
        "norm + MLP, GEMV + silu_mul": (chain(plain, mlp_step, True), True, True, True),
        "norm + MLP, GEMV + silu_mul, down after it": (chain(plain, mlp_step, True), True, False, True),
        "norm + MLP, gated GEMV, HINGE_PDL=0": (chain(gated_serial, mlp_step, True), False, True, True),
        "norm + MLP, GEMV + silu_mul, HINGE_PDL=0": (chain(plain_serial, mlp_step, True), False, True, True),
        "gate_up paired (plain out)": (chain(gated, lambda m, y: m.gate_up_proj(y)[:, : args.hidden]), True, True, True),
        "gate_up gated alone": (chain(gated, lambda m, y: m.gate_up_proj.gated(y, "silu")[:, : args.hidden]),
                                True, True, True),
        "gate_up + silu_mul": (chain(plain, lambda m, y: silu_mul(m.gate_up_proj(y))[:, : args.hidden]),
                               True, True, True),
        "gate_up alone (unpaired)": (chain(plain, lambda m, y: m.gate_up_proj(y)[:, : args.hidden]), True, True, True),
    }
    with torch.no_grad():
        assert torch.equal(gated[0](x), plain[0](x)), "the gated MLP's bits differ from the unfused"
        graphs = {}
        for name, (fn, pdl, down_early, gate_up_early) in variants.items():
            pdl_env(pdl)
            for m in (*gated, *plain):  # read as each GEMV is launched (captured)
                m.down_proj.nvfp4_mma_early, m.gate_up_proj.nvfp4_mma_early = down_early, gate_up_early
            graphs[name] = graphed(fn, x.clone())
        times = {name: [] for name in graphs}
        for _ in range(args.rounds):
            for name, graph in graphs.items():
                times[name].append(timed(graph, args.layers))
    print(f"{torch.cuda.get_device_name()}, hidden {args.hidden}, intermediate {args.inter}, batch 1, "
          f"{args.layers} calls over {args.distinct} distinct layers, PDL {gated_q.kernel.pdl}")
    print("| variant | us a layer (median) | min | max |")
    print("| --- | --- | --- | --- |")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {min(ts):.2f} | {max(ts):.2f} |")


if __name__ == "__main__":
    main()
