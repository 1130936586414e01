"""The tensor-core NVFP4 GEMV (``hinge_nvfp4/mma_gemv.cu``) on a GPU: its outputs against the
dequantized reference, and its time against hinge_nvfp4's Triton GEMV and the bytes-moved
roofline, for the Qwen3-8B layer shapes at M = 1, 2, 4, 8 (``--ms``: up to 16; past 8 rows
the plain and bulk forms also with two tiles a warp, ``plain_t2``, ``bulk_t2``); one run.

    python3 tools/gpu/nvfp4_mma_probe.py [--iters 100] [--splits 1 2 4 8] [--stages 3 4 6 8 10]
                                         [--layouts tile super] [--forms plain ahead]
                                         [--kwarps 1 2 4 8] [--shapes gate_up ...]
                                         [--best-json FILE] [--all-json FILE] [--hbm-tbs TB/s]
                                         [--ms 1 2 4 8 16] [--columns coalesced] [--spread]
    python3 tools/gpu/nvfp4_mma_probe.py --diagnose [--kwarps 1 2] [--splits ...] [--shapes ...]

Needs nvcc on PATH (the kernel is compiled at start, ~1 s a ring depth). Timing as
``nvfp4_gemm.py``'s: a CUDA graph of ``ROTATE`` calls over as many weight copies (from HBM, not
L2), the median of ``--iters`` replays. The kernel's time is its launch alone (it adds its K
splits itself, the last warp of a tile to finish, and its epilogue applies the per-tensor scale
and writes bf16), comparable with the Triton GEMV's whole call. Every ring depth of ``--stages``
is timed at every ``--splits`` and ``--kwarps`` (warps a tile, their sums added in shared
memory) in each memory order of ``--layouts`` (``tile``: a tile's
supersteps together; ``super``: ``mma_layout.superstep_major``; ``interleaved``: each block's
scales after its codes) and kernel form of ``--forms``
(``mma_gemv.KERNELS``); ``--all-json`` writes every variant's time; printed per shape and M: the
largest error of any variant against the reference, the Triton GEMV's time, the best variant and
the one ``kernel: mma`` runs (its layout and ``mma_tiling.tiling``), in
microseconds and % of the roofline. ``--best-json`` writes the (layout, form) whose ``kernel:
mma`` tilings have the least total time over the shapes at M = 1, for an end-to-end run to take
(``HINGE_NVFP4_MMA_LAYOUT`` / ``_FORM``); ``--plan-json`` the fastest right (splits, warps a
tile, stages, layout, form) of each shape at M = 1, a tuned-tilings file for
``HINGE_NVFP4_MMA_PLAN`` (with ``--ms 1 ... 16``, each shape's fastest 16-row launch over that
tiling's layout, ring, splits and prefetch as its ``r16``; each entry names ``--columns``, the
column map every variant runs in, and with ``--spread`` says so: every launch's blocks spread over
the multiprocessors, ``mma_gemv.MmaGemv`` spread). ``tools/gpu/nvfp4_launch_chain.py`` times the engine's own
calls of a tilings file (``--sweep``, ``--sweep16``), across column maps.
``--diagnose`` instead times, at M = 1 in that configuration and at each of ``--kwarps`` x
``--splits`` (given), the kernel against its two
diagnostic forms (``mma_gemv.DIAGNOSTICS``): the memory side alone (``ring``: the weights and x
streamed as the kernel streams them, the math a XOR fold) and the arithmetic alone (``math``:
every superstep computed from one copied once), which says which side bounds it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from nvfp4_gemm import (  # NOTE: the sibling script
    ROTATE,
    SHAPE_NAMES,
    SHAPES,
    graph_time,
    shapes_of,
    start,
)

from hinge_nvfp4 import mma_gemv as nvfp4_mma
from hinge_nvfp4 import mma_layout, mma_tiling
from hinge_nvfp4.mma_layout import LAYOUTS

WRONG = 1e-2  #: a variant's output further than this from the reference (relative) is wrong


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def weights(shapes: list[str] | None, layouts: list[str], columns: str = mma_layout.COLUMNS):
    """Per shape of ``SHAPES`` (those named in ``shapes``, or all): its label, (N, K), ``ROTATE``
    quantized random weights and their repacks (column map ``columns``) in each memory order of
    ``layouts``."""
    from hinge_nvfp4 import format as fp4

    for label, (n, k) in shapes_of(shapes):
        quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
                 for _ in range(ROTATE)]
        tile_major = [mma_layout.repack(q[0], q[1].view(torch.uint8), columns) for q in quant]
        yield label, (n, k), quant, {order: [mma_layout.in_order(*p, order) for p in tile_major]
                                     for order in layouts}


def read_time(quant: list, iters: int) -> float:
    """Microseconds of a plain read of one weight's codes and scales (a float32 sum over each of
    the ``ROTATE`` copies in turn, timed as the kernels are): what reading that many bytes costs
    a memory-bound kernel of torch's, start and drain included."""
    flat = [torch.cat([q[0].view(torch.uint8).flatten(), q[1].view(torch.uint8).flatten()]) for q in quant]
    flat = [f[: f.numel() // 4 * 4].view(torch.float32) for f in flat]  # (NaNs or not: read the same)
    return graph_time(lambda i=0: flat[i].sum(), iters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--stages", type=int, nargs="+", default=[3, 4, 6, 8, 10],
                        help="ring depths (supersteps of eight groups a warp)")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--forms", nargs="+", choices=tuple(nvfp4_mma.KERNELS), default=list(nvfp4_mma.KERNELS))
    parser.add_argument("--shapes", nargs="+", choices=SHAPE_NAMES, help="these shapes alone (default every one)")
    parser.add_argument("--kwarps", type=int, nargs="+", default=[1])
    parser.add_argument("--prefetch", type=int, nargs="+", default=[0], choices=nvfp4_mma.PREFETCHES,
                        help="the copies' L2 prefetch sizes (bytes) to build and time")
    parser.add_argument("--carveout", type=int, default=None,
                        help="every variant's preferred shared memory carveout (percent: MmaGemv "
                        "carveout; default the driver's choice)")
    parser.add_argument("--best-json", default=None)
    parser.add_argument("--all-json", default=None, help="every variant's us, by shape and M")
    parser.add_argument("--plan-json", default=None, help="the fastest tiling a shape at M = 1")
    parser.add_argument("--columns", choices=mma_layout.COLUMN_MAPS, default=mma_layout.COLUMNS,
                        help="the weights' column map (every variant; --plan-json names it)")
    parser.add_argument("--spread", action="store_true",
                        help="every launch spread over the multiprocessors (--plan-json names it)")
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hbm-tbs", type=float, default=None,
                        help="peak HBM bandwidth (default: 4.8 on an H200, 3.35 on an H100, by name)")
    args = parser.parse_args()
    args.splits_given = "--splits" in sys.argv
    args.hbm_tbs = start(args.hbm_tbs)  # (exits without CUDA)
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.triton_gemv import nvfp4_gemv

    if args.diagnose:
        return diagnose(args)
    stages = sorted(set(args.stages) | set(nvfp4_mma.RING_STAGES))
    forms = sorted(set(args.forms) | {MmaKernel.FORM})
    prefetches = sorted(set(args.prefetch) | {nvfp4_mma.PREFETCH})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kwarps = sorted(set(args.kwarps) | {mma_tiling.tiling(n, k, sms).kwarps
                                        for n, k in SHAPES.values()})
    # a cubin by (stages, prefetch, warps a block): 8 warps a tile (--kwarps 8) in their own,
    # rings of at most WIDE_MAX_STAGES
    built = [(st, kw, pf) for st in stages for kw in kwarps for pf in prefetches
             if kw != nvfp4_mma.WIDE_WARPS or st <= nvfp4_mma.WIDE_MAX_STAGES]
    cubins = {key: nvfp4_mma.build_cubin("sm_90", key[0], key[1], warps=key[2], columns=args.columns)
              for key in {(st, pf, nvfp4_mma.block_warps(kw)) for st, kw, pf in built}}

    def cubin(st, kw, pf):
        return cubins[(st, pf, nvfp4_mma.block_warps(kw))]

    kernels = {(form, st, kw, pf): nvfp4_mma.MmaGemv(cubin(st, kw, pf), form, st, kw, carveout=args.carveout,
                                                     columns=args.columns, spread=args.spread)
               for form in forms for st, kw, pf in built}
    # two tiles a warp at 9 .. 16 rows (MmaGemv tiles16=2): forms "plain_t2", "bulk_t2"
    kernels |= {(f"{form}_t2", st, kw, pf): nvfp4_mma.MmaGemv(cubin(st, kw, pf), form, st, kw,
                                                              carveout=args.carveout, tiles16=2,
                                                              columns=args.columns, spread=args.spread)
                for form in forms for st, kw, pf in built if nvfp4_mma.two_tiles_built(form, st, kw)}
    tuned: dict = {}  # "NxK" -> the fastest right tiling at M = 1 (--plan-json)
    every: dict = {}  # "shape M" -> {"layout form stages splits kwarps": us}
    ours_total: dict = {}  # (layout, form) -> us over the shapes at M = 1 as kernel: mma runs them
    wrong: set = set()  # forms that gave a wrong output anywhere: out of "best" and --best-json
    print(f"{torch.cuda.get_device_name()}; MMA GEMV vs hinge_nvfp4's Triton GEMV, us (median)")
    ours_layout = MmaKernel.LAYOUT
    layouts = sorted(set(args.layouts) | {ours_layout})
    print("| shape | M | max rel err (right variants) | Triton us (%) | best MMA us (layout, form, stages, splits, kw, %) | "
          f"kernel: mma us ({ours_layout}, {MmaKernel.FORM}, tiling's stages, splits, kw, %) |")
    print("| --- | --- | --- | --- | --- | --- |")
    reads: dict = {}  # shape -> us of a plain read of its weight bytes (read_time)
    for label, (n, k), quant, packs_of in weights(args.shapes, layouts, args.columns):
        ones = torch.ones(n, device="cuda")
        reads[label] = read_time(quant, args.iters)
        ref_w = fp4.dequantize(quant[0][0], quant[0][1], 1.0)
        plan = mma_tiling.tiling(n, k, sms)
        for m in args.ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            roof = (n * k // 2 + n * k // 16 + 2 * m * (k + n)) / (args.hbm_tbs * 1e12) * 1e6
            want = x.float() @ ref_w.t()
            times, worst = {}, 0.0  # (layout, form, stages, splits, kwarps, prefetch) -> us; the largest right error
            for layout, (form, st, kw, pf) in ((lay, key) for lay in layouts for key in kernels):
                if form.endswith("_t2") and m <= nvfp4_mma.SET_ROWS:
                    continue  # the same kernel as the form's below 9 rows
                gemv, packs = kernels[(form, st, kw, pf)], packs_of[layout]
                for splits in sorted(set(args.splits) | {plan.splits}):
                    groups = k // 16
                    per_split = mma_tiling.groups_per_split(groups, splits)
                    count = -(-groups // per_split)
                    part = torch.empty(count, m, n, device="cuda") if count > 1 else None
                    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                    gemv.reserve_counters(n // 16, torch.device("cuda"))

                    def run(i=0, part=part, out=out, per_split=per_split, x=x, gemv=gemv, ones=ones,
                            packs=packs):
                        words, codes = packs[i]
                        # NOTE: the bf16 output as is: a .float() here was a second kernel in every
                        # timed call (the eighth and the ninth session's first probe paid it)
                        return gemv(words, codes, x, part, per_split, row_scale=ones, out=out)

                    got = run().float()
                    torch.cuda.synchronize()
                    err = ((got - want).abs().max() / want.abs().max()).item()
                    times[(layout, form, st, count, kw, pf)] = graph_time(run, args.iters)
                    if not err <= WRONG:  # NaN too
                        wrong.add(form)
                        print(f"WRONG: {label} M = {m} {layout} {form} {st} stages {count} splits "
                              f"{kw} warps a tile, prefetch {pf}: relative error {err:.2e}")
                    else:
                        worst = max(worst, err)
            triton_us = graph_time(lambda i=0, x=x, q=quant, rs=ones: nvfp4_gemv(
                x, q[i][0], q[i][1], rs, None), args.iters)
            right = {key: us for key, us in times.items() if key[1] not in wrong}
            every[f"{label.split()[0]} {m}"] = {" ".join(map(str, key)): round(us, 2)
                                                for key, us in times.items()}
            (blay, bform, bst, bsp, bkw, bpf), best = min(right.items(), key=lambda kv: kv[1])
            ours = times[(ours_layout, MmaKernel.FORM, plan.stages, plan.splits, plan.kwarps,
                          nvfp4_mma.PREFETCH)]
            if m == 1:
                for lay in layouts:
                    for form in forms:
                        ours_total[(lay, form)] = (ours_total.get((lay, form), 0.0) + times[
                            (lay, form, plan.stages, plan.splits, plan.kwarps, nvfp4_mma.PREFETCH)])
                tuned[f"{n}x{k}"] = {"splits": bsp, "kwarps": bkw, "stages": bst, "layout": blay,
                                     "form": bform, "prefetch": bpf, "columns": args.columns}
                if args.spread:
                    tuned[f"{n}x{k}"]["spread"] = True
            elif m == nvfp4_mma.MAX_ROWS and f"{n}x{k}" in tuned:
                # the 16-row launch over the M = 1 winner's repack, ring, splits and prefetch
                one = tuned[f"{n}x{k}"]
                same = {key: us for key, us in right.items()
                        if (key[0], key[2], key[3], key[5]) == (one["layout"], one["stages"], one["splits"],
                                                                one["prefetch"])}
                if same:
                    (_, form16, _, _, kw16, _), _ = min(same.items(), key=lambda kv: kv[1])
                    one["r16"] = {"kwarps": kw16, "form": form16.removesuffix("_t2"),
                                  "tiles": 2 if form16.endswith("_t2") else 1}
            print(f"| {label} | {m} | {worst:.2e} | {triton_us:.1f} ({100 * roof / triton_us:.0f}%) | "
                  f"{best:.1f} ({blay}, {bform}, {bst}, {bsp}, kw {bkw}, pf {bpf}, {100 * roof / best:.0f}%) | "
                  f"{ours:.1f} ({plan.stages}, {plan.splits}, {plan.kwarps}, {100 * roof / ours:.0f}%) |")
    print("\na plain read of each shape's weight bytes (torch's float32 sum over ROTATE copies, same "
          "timing), % of the roofline it reaches: the fixed cost a kernel of that size pays")
    for label, us in reads.items():
        n, k = SHAPES[label]
        roof = (n * k // 2 + n * k // 16) / (args.hbm_tbs * 1e12) * 1e6
        print(f"  {label}: {us:.1f} us, {100 * roof / us:.0f}% of {args.hbm_tbs} TB/s")
    if ours_total:
        print("\nkernel: mma's configurations at M = 1, us summed over the shapes: " + ", ".join(
            f"{lay}/{form} {us:.1f}" for (lay, form), us in sorted(ours_total.items())))
    ours_total = {key: us for key, us in ours_total.items() if key[1] not in wrong}
    if args.plan_json and tuned:
        Path(args.plan_json).write_text(json.dumps(tuned, indent=1))
    if args.all_json:
        Path(args.all_json).write_text(json.dumps(every, indent=1))
    if args.best_json and ours_total:
        (lay, form), _ = min(ours_total.items(), key=lambda kv: kv[1])
        Path(args.best_json).write_text(json.dumps({"layout": lay, "form": form}))


def diagnose(args: argparse.Namespace) -> None:
    from hinge_nvfp4.kernels import MmaKernel

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    forms = (MmaKernel.FORM, *nvfp4_mma.DIAGNOSTICS)
    launchers: dict = {}

    def launcher(form, stages, kw, pf):
        if (form, stages, kw, pf) not in launchers:
            launchers[(form, stages, kw, pf)] = nvfp4_mma.MmaGemv(
                nvfp4_mma.cached_cubin("sm_90", stages, prefetch=pf, warps=nvfp4_mma.block_warps(kw),
                                       columns=args.columns),
                form, stages, kw, columns=args.columns, spread=args.spread)
        return launchers[(form, stages, kw, pf)]

    print(f"{torch.cuda.get_device_name()}; kernel: mma ({MmaKernel.FORM}) and its diagnostic forms "
          "at M = 1, us (median)")
    print("| shape | layout | prefetch | splits | warps a tile | kernel us (%) | memory side alone us "
          "(TB/s) | arithmetic alone us |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, (n, k), _, packs_of in weights(args.shapes, args.layouts, args.columns):
        plan, groups = mma_tiling.tiling(n, k, sms), k // 16
        nbytes = n * k // 2 + n * k // 16 + 2 * (k + n)
        roof = nbytes / (args.hbm_tbs * 1e12) * 1e6
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ones = torch.ones(n, device="cuda")
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        for layout, pf, asked, kw in ((lay, pf, sp, kw) for lay in args.layouts for pf in args.prefetch
                                      for sp in (sorted(set(args.splits)) if args.splits_given
                                                 else [plan.splits])
                                      for kw in args.kwarps):
            per_split = mma_tiling.groups_per_split(groups, asked)
            splits = ceil_div(groups, per_split)
            part = torch.empty(splits, 1, n, device="cuda") if splits > 1 else None
            times = {}
            for form in forms:
                gemv = launcher(form, plan.stages, kw, pf)
                gemv.reserve_counters(n // 16, torch.device("cuda"))

                def run(i=0, gemv=gemv, packs=packs_of[layout], part=part, per_split=per_split,
                        x=x, ones=ones, out=out):
                    return gemv(*packs[i], x, part, per_split, row_scale=ones, out=out)

                times[form] = graph_time(run, args.iters)
            full = times[MmaKernel.FORM]
            print(f"| {label} | {layout} | {pf} | {splits} | {kw} | {full:.1f} ({100 * roof / full:.0f}%) | "
                  f"{times['ring']:.1f} ({nbytes / times['ring'] / 1e6:.2f}) | {times['math']:.1f} |")


if __name__ == "__main__":
    main()
