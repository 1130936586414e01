"""Where a decode GEMV's time goes between kernels: kernel: mma's warps' timelines; one run.

    python tools/gpu/nvfp4_trace.py [--chain same|layer] [--shapes qkv ...] [--ms 1] [--out DIR]
                                    [--wait-first] [--row-scale start|wait]

The GEMVs are built with ``MMA_TRACE`` (``mma_gemv.build_cubin(trace=True)``: each warp's lane 0
takes ``%globaltimer`` and its multiprocessor's clock at seven marks, mma_gemv.cu's ``Marks``)
and launched by ``kernel: mma`` as the engine launches them (the shipped tilings, PDL), from a
CUDA graph of ``ROTATE`` weight copies as ``nvfp4_gemm.py`` times them: ``--chain same`` a
shape's copies in turn (the GEMM table's chain), ``--chain layer`` each copy's qkv, o, the gated
gate_up and down in the decode step's order (its norms and attention left out). A replay runs
after a warm one, its records are read, and for each call past the first this prints, in us
from the end of the call before (its last warp's mark 6): its warps' entry, the prologue's
copies (and any L2 prefetches) issued, the return from ``griddepcontrol.wait``, superstep 0's
weights landed, superstep 0 computed (x had arrived), the last superstep computed, done; the
period (last done to last done) against the weight bytes at the chain's own streaming rate; and
the most warps one multiprocessor held. ``--out`` keeps the raw records
(``trace-<chain>-m<M>.npz``) for a closer look. Also both graphs timed as
``nvfp4_gemm.graph_time``'s steady clock, the trace build and the shipped one (over weights of
its own), so the marks' own cost shows. ``--wait-first``: every PDL build waits before its
ring's first copies (``mma_gemv.build_cubin(wait_first=True)``), the call before alone;
``--row-scale``: every build reads its epilogue's row_scale at that time
(``mma_gemv.ROW_SCALE_READS``; default: when each shape's tiling says, as shipped).
"""

from __future__ import annotations

import argparse
import ctypes
import os

import numpy as np
import torch
from nvfp4_gemm import (  # NOTE: the sibling script
    ROTATE,
    SHAPES,
    cubins_built,
    graph_time,
    layers_of,
    start,
)

FIELDS = 2 + 2 * 7  #: a record's words (mma_gemv.cu: address, ids, 7 times, 7 clocks)
TRACE_BUILDS: dict = {}  #: traced_cubins' builds by build_cubin's arguments


def traced_cubins(wait_first: bool = False, row_scale: str | None = None):
    """Within it, ``mma_gemv.cached_cubin`` gives trace builds (kept in memory, never on disk);
    ``wait_first``: their PDL builds wait before the prologue's copies (``--wait-first``);
    ``row_scale``: when their epilogues' row_scale is read (``--row-scale``; None: when each
    launcher's tiling reads it, as shipped). A
    launcher made inside keeps its trace build; one made outside gets the shipped cubin. Each
    build is made once a process (``TRACE_BUILDS``; ``nvfp4_gemm.cubins_built``)."""
    return cubins_built(lambda call: {"trace": True, "wait_first": wait_first and call["pdl"],
                                      "row_scale": row_scale or call["row_scale"]}, TRACE_BUILDS)


class TraceBuffer:
    """A loaded trace module's ``mma_trace`` records and ``mma_trace_next`` count."""

    def __init__(self, gemv) -> None:
        self.cuda = gemv.cuda
        self.records, self.count = ctypes.c_uint64(), ctypes.c_uint64()
        size = ctypes.c_size_t()
        for name, ptr in ((b"mma_trace", self.records), (b"mma_trace_next", self.count)):
            code = self.cuda.cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), gemv.module, name)
            if code != 0:
                raise RuntimeError(f"cuModuleGetGlobal({name.decode()}) failed with {code}: not a trace build")
            if name == b"mma_trace":
                self.capacity = size.value // (8 * FIELDS)

    def reset(self) -> None:
        torch.cuda.synchronize()
        self.cuda.cuMemsetD32_v2(self.count, 0, 1)

    def read(self) -> np.ndarray:
        torch.cuda.synchronize()
        n = ctypes.c_uint32()
        self.cuda.cuMemcpyDtoH_v2(ctypes.byref(n), self.count, 4)
        rows = min(n.value, self.capacity)
        out = np.zeros((rows, FIELDS), dtype=np.uint64)
        if rows:
            self.cuda.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), self.records, out.nbytes)
        if n.value > self.capacity:
            print(f"(trace buffer full: {n.value} records, kept {self.capacity})")
        return out


def chain(kernel, args, m: int) -> list:
    """The graphs to time: (label, ``fn(i)`` running copy i's calls, its steps) a graph; a step
    is (shape, its ``ROTATE`` layers, x, gated, weight bytes). ``--chain same``: a graph a shape
    of ``--shapes``; ``layer``: one graph of the four in the decode step's order."""
    from hinge_nvfp4 import format as fp4

    steps = []
    for label, (n, k) in SHAPES.items():
        name = label.split()[0]
        if args.chain == "same" and name not in args.shapes:
            continue
        gated = args.chain == "layer" and name == "gate_up"
        quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(ROTATE)]
        steps.append((name, layers_of(kernel, quant, n, pairs=gated),
                      torch.randn(m, k, device="cuda", dtype=torch.bfloat16), gated, n * k * 9 // 16))
    if args.chain == "layer":
        order = {"qkv": 0, "o": 1, "gate_up": 2, "down": 3}
        steps.sort(key=lambda s: order[s[0]])
    graphs = [[s] for s in steps] if args.chain == "same" else [steps]

    def calls(part: list):
        def fn(i=0):
            for _, layers, x, gated, _ in part:
                if gated:
                    kernel.gated(layers[i], x, "silu")
                else:
                    kernel.linear(layers[i], x, None, None)
        return fn

    return [(part[0][0] if args.chain == "same" else "layer", calls(part), part) for part in graphs]


def calls_of(records: np.ndarray, steps: list) -> list:
    """The records cut into calls in launch order: (label, bytes, records) a call."""
    by_address = {}
    for name, layers, _, _, nbytes in steps:
        for i, layer in enumerate(layers):
            by_address[layer.nvfp4_mma_words.data_ptr()] = (i, name, nbytes)
    order = {name: j for j, (name, *_) in enumerate(steps)}
    calls = {}
    for address in np.unique(records[:, 0]):
        i, name, nbytes = by_address[int(address)]
        calls[(i, order[name])] = (f"{name}[{i}]", nbytes, records[records[:, 0] == address])
    return [calls[key] for key in sorted(calls)]


def report(calls: list, gemv_rate: float) -> None:
    """A line a call, in us from the end of the call before (``report``'s columns: module doc)."""
    print(f"  {'call':12} {'warps':>5} {'entry min/med/max':>19} {'issued':>6} {'wait med/max':>13} {'w0':>6} {'x0':>6} "
          f"{'loop med/p90/max':>18} {'done med/max':>13} {'period':>7} {'bytes/rate':>10} {'max/SM':>6}")
    prev_end = None
    for label, nbytes, rec in calls:
        times = rec[:, 2:9].astype(np.int64)
        origin = prev_end if prev_end is not None else times[:, 0].min()

        def us(col, q, times=times, origin=origin):
            v = times[:, col]
            v = v[v > 0] - origin  # in integers: %globaltimer's ~1.8e18 ns as a float64 is 256 ns a step
            return np.quantile(v, q) / 1e3 if len(v) else float("nan")

        end = times[:, 6].max()
        sms = np.bincount((rec[:, 1] >> 48).astype(np.int64))
        period = (end - prev_end) / 1e3 if prev_end is not None else float("nan")
        print(f"  {label:12} {len(rec):5d} {us(0, 0):6.2f} {us(0, .5):5.2f} {us(0, 1):6.2f} {us(1, .5):6.2f} "
              f"{us(2, .5):6.2f} {us(2, 1):6.2f} {us(3, .5):6.2f} {us(4, .5):6.2f} "
              f"{us(5, .5):6.2f} {us(5, .9):5.2f} {us(5, 1):5.2f} {us(6, .5):6.2f} {us(6, 1):6.2f} "
              f"{period:7.2f} {nbytes / gemv_rate:10.2f} {sms.max():6d}")
        prev_end = end


def resolution(records: np.ndarray) -> float:
    """The smallest step between two distinct %globaltimer values recorded, ns."""
    v = np.unique(records[:, 2:9][records[:, 2:9] > 0].astype(np.int64))
    d = np.diff(v)
    return float(d[d > 0].min()) if len(d) else float("nan")


def main(args) -> None:
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.options import NVFP4Options

    dq = NVFP4Options().prefill_dequant_rows
    shipped = MmaKernel(dequant_rows=dq)
    with traced_cubins(args.wait_first, args.row_scale):
        traced = MmaKernel(dequant_rows=dq)
    for m in args.ms:
        plains = chain(shipped, args, m)  # (its launchers made here: the shipped cubins)
        with traced_cubins(args.wait_first, args.row_scale):
            traced_graphs = chain(traced, args, m)
        for (label, fn, steps), (_, plain, _) in zip(traced_graphs, plains, strict=True):
            t_trace = graph_time(fn, args.iters, args.replays)
            t_plain = graph_time(plain, args.iters, args.replays)  # its own weights: the same launches
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(ROTATE):
                    fn(i)
            buffers = [TraceBuffer(g) for g in traced._gemvs.values()]
            graph.replay()  # warm
            for b in buffers:
                b.reset()
            graph.replay()
            records = np.concatenate([b.read() for b in buffers])
            calls = calls_of(records, steps)
            total = sum(nbytes for _, nbytes, _ in calls)
            span = (records[:, 8].astype(np.int64).max() - records[:, 2].astype(np.int64).min()) / 1e3
            print(f"\n{label} M = {m}: {len(calls)} calls, {len(records)} warp records, %globaltimer step "
                  f"{resolution(records):.0f} ns; graph steady {t_trace:.2f} us a call traced, "
                  f"{t_plain:.2f} shipped; {total / span / 1e6:.2f} TB/s over the replay")
            rate = 3.0e6  # bytes a us at 3.0 TB/s: the 'bytes/rate' column's yardstick
            report(calls, rate)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                np.savez_compressed(os.path.join(args.out, f"trace-{args.chain}-{label}-m{m}.npz"),
                                    records=records, labels=np.array([c[0] for c in calls]))
            for b in buffers:
                b.reset()


if __name__ == "__main__":
    from hinge_nvfp4.mma_gemv import ROW_SCALE_READS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", choices=("same", "layer"), default="same")
    parser.add_argument("--shapes", nargs="+", default=["qkv", "gate_up", "down", "o"])
    parser.add_argument("--ms", type=int, nargs="+", default=[1])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--hbm-tbs", type=float, default=None)
    parser.add_argument("--out", help="a directory for the raw records")
    parser.add_argument("--wait-first", action="store_true",
                        help="trace builds that wait before the ring's first copies (mma_gemv.build_cubin "
                             "wait_first): whether the wait's return is the call before or this warp's copies")
    parser.add_argument("--row-scale", choices=ROW_SCALE_READS,
                        help="trace builds whose epilogue's row_scale is read then (mma_gemv.build_cubin "
                             "row_scale): the last round trip of a call taken off its end")
    args = parser.parse_args()
    args.hbm_tbs = start(args.hbm_tbs, "; kernel: mma's warps' timelines (us)")
    main(args)
