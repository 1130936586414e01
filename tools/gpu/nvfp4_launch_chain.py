"""kernel: mma's decode GEMVs back to back, by when each lets the next launch and whether it asks
L2 for its whole weight stream first; one run.

    python tools/gpu/nvfp4_launch_chain.py [--ms 1 8 16] [--iters 50] [--replays 4]

A GEMV of 14 to 57 MB (Qwen3-8B's qkv, gate_up, down, o) spends a few microseconds starting and
draining that its bytes do not need (docs/nvfp4.md). Built for programmatic dependent launch it
copies its first weights before it waits for the kernel before it; this script times the builds
(``mma_gemv.TRIGGERS`` x ``l2_ahead``) as ``nvfp4_gemm.py``'s GEMM table times ``kernel: mma``:
the engine's call on ``ROTATE`` weight copies in turn in one CUDA graph, each launched early
behind the one before, so each reads its weights from HBM. Two clocks: ``replay`` (events around
one replay, as the GEMM table; the graph's launch counts in it) and ``steady`` (a replay already
running when the first event is recorded, then ``--replays`` more: the kernels alone). Percent of
the datasheet bandwidth (``--hbm-tbs``: 3.35 TB/s on an H100, 4.8 otherwise), as the table's.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys

import torch
from nvfp4_gemm import ROTATE, SHAPES, graph_time, peak_hbm_tbs  # NOTE: the sibling script

BUILDS = (("read", False), ("read", True), ("start", False), ("start", True))


def steady_time(fn, iters: int, replays: int) -> float:
    """Median microseconds per ``fn()`` call over ``replays`` replays of a graph of ROTATE calls,
    the first event recorded while a replay already runs (no idle GPU between them)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(ROTATE):
            fn(i)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graph.replay()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / (ROTATE * replays))
    return statistics.median(times)


def layers_for(kernel, quant: list, n: int) -> list:
    layers = []
    for packed, scales, _ in quant:
        layer = torch.nn.Module()
        layer.row_scale = torch.ones(n, device="cuda")
        kernel.prepare_linear(layer, packed, scales)
        layers.append(layer)
    return layers


def main(args) -> None:
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.options import NVFP4Options

    rows = NVFP4Options().prefill_dequant_rows  # as the engine builds it: the codes freed
    kernels = {(t, a): MmaKernel(dequant_rows=rows, trigger=t, l2_ahead=a) for t, a in BUILDS}
    names = [f"{t}{'+l2' if a else ''}" for t, a in BUILDS]
    print(f"{'shape':10} {'M':>3} {'clock':7} {'bf16':>7} " + " ".join(f"{n:>13}" for n in names))
    for label, (n, k) in SHAPES.items():
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
        quant = [fp4.quantize_weight(w) for w in ws]
        per_build = {key: layers_for(kn, quant, n) for key, kn in kernels.items()}
        for m in args.ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            roof = (n * k // 2 + n * k // 16 + 2 * m * (k + n)) / (args.hbm_tbs * 1e12) * 1e6
            for clock in ("replay", "steady"):
                def timed(fn, clock=clock):
                    return graph_time(fn, args.iters) if clock == "replay" else steady_time(
                        fn, args.iters, args.replays)

                bf16 = timed(lambda i=0, x=x, ws=ws: torch.nn.functional.linear(x, ws[i]))
                cells = []
                for key, kn in kernels.items():
                    t = timed(lambda i=0, x=x, kn=kn, ls=per_build[key]: kn.linear(ls[i], x, None, None))
                    cells.append(f"{t:6.1f} ({100 * roof / t:3.0f}%)")
                print(f"{label.split()[0]:10} {m:>3} {clock:7} {bf16:7.1f} " + " ".join(cells), flush=True)
        del per_build, quant


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--hbm-tbs", type=float, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    args.hbm_tbs = args.hbm_tbs or peak_hbm_tbs()
    print(f"{datetime.date.today()} {torch.cuda.get_device_name()} torch {torch.__version__}; "
          f"us a call (% of {args.hbm_tbs} TB/s), {ROTATE} weight copies in turn, launched early")
    main(args)
