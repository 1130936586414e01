"""kernel: mma's decode GEMVs back to back under the shipped tilings and variants of them; one run.

    python tools/gpu/nvfp4_launch_chain.py [--ms 1 8 16] [--iters 50] [--replays 4]
        [--columns contiguous coalesced] [--variants shipped ...]
        [--sweep KWARPS ... | --sweep16 [--from-rows N]] [--shapes qkv ...]

Each variant is the tilings file shipped for this GPU (or the one ``$HINGE_NVFP4_MMA_PLAN``
names) with every shape's entry changed the same way (``VARIANTS``: launches spread evenly over
the multiprocessors, the next kernel let launch at a GEMV's start; rings of 8; K in 2 or 4 splits; the register form ``regs`` (no ring;
up to 8 rows, its 16-row launch ``R16_PLAIN``); eight warps a tile, a block a tile, in the
plain or bulk form; its 16-row launch likewise; ``ring ...``: the memory side alone, each
launch of up to 8 rows made by the diagnostic ``ring`` form of its own cubin and tiling, "-" at
more rows; ``--sweep``: every form and memory order at those warps a tile;
``--sweep16``: every 16-row launch, taking ``--from-rows`` rows on), run through ``kernel: mma``
as the engine builds it (``$HINGE_NVFP4_MMA_PLAN``), in each column map of ``--columns`` (every
shape's entry naming it; a label past the first map's names its map). Timed as ``nvfp4_gemm.py``'s GEMM table times ``kernel: mma``:
``ROTATE`` weight copies in turn in one CUDA graph, each launched early behind the one before,
so HBM serves them; two clocks: ``replay`` (events around one replay, as the GEMM table) and
``steady`` (``--replays`` replays timed from while one already runs: the kernels alone). Percent
of the datasheet bandwidth (``--hbm-tbs``: 3.35 TB/s on an H100, 4.8 otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile

import torch
from nvfp4_gemm import (  # NOTE: the sibling script
    ROTATE,
    SHAPE_NAMES,
    cubins_built,
    graph_time,
    layers_of,
    shapes_of,
    start,
)

R16_PLAIN = {"kwarps": 4, "form": "plain", "tiles": 1}  #: a 16-row launch any ring depth builds
#: a variant's key (never written to its tilings file): each launch of fewer than 9 rows replaced by
#: the diagnostic ``ring`` form of the same cubin (True; ``mma_gemv.DIAGNOSTICS``: the weights and
#: x streamed as the plain form streams them, a XOR fold for the math), or by the one named
#: (``regs_fold``: ``mma_gemv.REGS_DIAGNOSTICS``, as the register form loads them): the memory side
#: alone, as the variant launches it (PDL or not: ``$HINGE_PDL``)
MEMORY_ALONE = "memory alone"
#: a variant's key (never written to its tilings file either): its launchers loaded from the
#: build ``mma_gemv.build_cubin(**options)`` of these options: ``r16_diag`` (``R16_DIAGS``: the
#: 16-row kernels' second set with its x never loaded, or with its MMAs not issued; their sums
#: wrong: of a 16-row launch's cost over an 8-row one's, how much is x's loads and how much the
#: MMAs), ``r16_warps`` (``R16_WARPS``: those kernels held to fewer registers), ``no_wait`` (no
#: ``griddepcontrol.wait``: what waiting for the launch before costs), ``x_once`` (x loaded for
#: a warp's first superstep only: what x's loads cost), ``x_same`` (x loaded every superstep, always
#: the first one's pieces: L1 hits), ``wg_x_ahead`` (the wgmma forms' x further ahead). (The thirty-third
#: session's ``x_prefetch`` builds, x's lines asked into L1 ahead, ran at tree 0dbe7a1, slower on
#: every shape, and were removed: docs/nvfp4.md)
BUILD_OPTIONS = "build options"
#: a variant's key (never written to its tilings file either): each shape's own further change,
#: by the file's key (``"6144x4096"``), merged over the variant's change for that shape alone
PER_SHAPE = "per shape"
#: the wgmma forms' splits of K a shape (one warp a tile, so K is cut by splits alone): as many
#: warps as the shipped launches (qkv 1536, gate_up 1536, down 2048, o 1024), and twice that
WG_SPLITS = {"6144x4096": 4, "24576x4096": 1, "4096x12288": 8, "4096x4096": 4}
WG_SPLITS_2 = {shape: 2 * splits for shape, splits in WG_SPLITS.items()}


def wg_variant(form: str, splits: dict, kwarps: int = 1, columns: str | None = None) -> dict:
    """Every launch in the wgmma form ``form`` (mma_gemv.WG_FORMS: x loaded once a block into
    shared memory, wgmma's B), K cut in ``splits[shape]`` and shared by ``kwarps`` warpgroups a
    block (past one: the natural build's), no 16-row launch of its own (the form's _r16 kernel of
    the same launcher takes 9 .. 16 rows); ``columns``: the repack's column map (``natural``: x
    copied into shared memory as it lies, beside the weights)."""
    return {"form": form, "kwarps": kwarps, "r16": None, **({"columns": columns} if columns else {}),
            PER_SHAPE: {shape: {"splits": n} for shape, n in splits.items()}}


#: the natural wgmma forms' splits of K a shape at 2 and 4 warpgroups a block (K shared by a
#: block's warpgroups rather than cut by splits: as many warps as ``WG_SPLITS``' launches)
WG_SPLITS_KW2 = {shape: max(1, splits // 2) for shape, splits in WG_SPLITS.items()}
WG_SPLITS_KW4 = {shape: max(1, splits // 4) for shape, splits in WG_SPLITS.items()}


#: label -> the change to every shape's tuned entry (None: the shipped file as it is)
VARIANTS = {
    "shipped": None,
    "spread": {"spread": True},
    "spread start": {"spread": True, "trigger": "start"},
    "start": {"trigger": "start"},
    "spread read": {"spread": True, "trigger": "read"},
    "start alone": {"spread": False, "trigger": "start"},
    "neither": {"spread": False, "trigger": "read"},
    # rings of 8 (7 supersteps copied before griddepcontrol.wait: all of a qkv or o warp's 8 at
    # 4 warps a tile), 4-warp cubins only (not down's 8 warps a tile)
    "deep start": {"spread": False, "trigger": "start", "stages": 8, "r16": R16_PLAIN},
    "deep neither": {"spread": False, "trigger": "read", "stages": 8, "r16": R16_PLAIN},
    "deep spread start": {"spread": True, "trigger": "start", "stages": 8, "r16": R16_PLAIN},
    # rings of 9: all 8 of a qkv or o warp's supersteps (4 warps a tile) copied before
    # griddepcontrol.wait, as the PDL read asks for all its bytes first (rings of 8 leave the last
    # one to after the wait: a round trip then); unspread (the next call's blocks beside this
    # call's as shared memory allows: 5 of 40.5 KiB) or spread (none beside)
    "whole start": {"spread": False, "trigger": "start", "stages": 9, "r16": R16_PLAIN},
    "whole spread": {"spread": "least", "trigger": "start", "stages": 9, "r16": R16_PLAIN},
    # shallower rings: 2 or 1 supersteps copied before griddepcontrol.wait, not 3 (the wait
    # returned later the more a warp had in flight: docs/nvfp4.md, twenty-third session)
    "shallow 3": {"stages": 3},
    "shallow 2": {"stages": 2},
    # the epilogue's row_scale read at the start, before the wait, or just after it (row_scale:
    # the call's last round trip taken off its end; twenty-fourth session), in rings of 4 and of 3
    "scale end": {"row_scale": "end"},  # (the H100 file names "wait" since then: the file before it)
    "scale start": {"row_scale": "start"},
    "scale wait": {"row_scale": "wait"},
    "scale wait shallow 3": {"row_scale": "wait", "stages": 3},
    # the memory side alone (MEMORY_ALONE) launched as the shipped file launches, with the trigger
    # after the weights are read, in rings of 8 spread or not (4-warp shapes, as "deep ...")
    "ring": {MEMORY_ALONE: True},
    "ring read": {"trigger": "read", MEMORY_ALONE: True},
    "ring deep": {"spread": True, "trigger": "start", "stages": 8, "r16": R16_PLAIN, MEMORY_ALONE: True},
    "ring deep alone": {"spread": False, "trigger": "start", "stages": 8, "r16": R16_PLAIN, MEMORY_ALONE: True},
    "ring whole": {"spread": False, "trigger": "start", "stages": 9, "r16": R16_PLAIN, MEMORY_ALONE: True},
    "ring whole spread": {"spread": "least", "trigger": "start", "stages": 9, "r16": R16_PLAIN, MEMORY_ALONE: True},
    # the memory side alone in each memory order of the weights (mma_layout.LAYOUTS), the rest
    # as shipped: does any order stream as the PDL read's contiguous runs do? (thirty-first session)
    "ring tile": {"layout": "tile", MEMORY_ALONE: True},
    "ring super": {"layout": "super", MEMORY_ALONE: True},
    "ring interleaved": {"layout": "interleaved", MEMORY_ALONE: True},
    # K in 2 or 4 splits (a warp's run a half or a quarter as long, twice or four times the
    # blocks: finer pieces of work), the GEMV and its memory side alone
    "split2": {"splits": 2},
    "ring split2": {"splits": 2, MEMORY_ALONE: True},
    "split4": {"splits": 4},
    "ring split4": {"splits": 4, MEMORY_ALONE: True},
    # every warp's whole run asked of L2 before its wait (mma_gemv.PREFETCHES "run"), as the PDL
    # read asks for its bytes; the ring then copies from L2
    "run": {"prefetch": "run"},
    "run read": {"prefetch": "run", "trigger": "read"},
    "ring run": {"prefetch": "run", MEMORY_ALONE: True},
    # the register form: no ring, a warp's first 8 supersteps all asked for before the wait
    # (mma_gemv.ONE_SET: up to 8 rows, so the 16-row launch named; 1, 2 or 4 warps a tile: on
    # the H100 run it with --shapes qkv gate_up o)
    "regs": {"form": "regs", "r16": R16_PLAIN},
    "regs read": {"form": "regs", "trigger": "read", "r16": R16_PLAIN},
    # ... at 2 warps a tile: half the blocks (qkv 192, 1.5 a multiprocessor, so that the next
    # launch's fit beside them in registers), a warp's second 8 supersteps after the wait
    "regs kw2": {"form": "regs", "kwarps": 2, "r16": R16_PLAIN},
    # ... at 4 warps a tile (down's shipped 8 is not built for it: run down with this one)
    "regs kw4": {"form": "regs", "kwarps": 4, "r16": R16_PLAIN},
    # their memory side alone (the register form's loads, a XOR fold for the math)
    "regs fold": {"form": "regs", "r16": R16_PLAIN, MEMORY_ALONE: "regs_fold"},
    "regs fold kw4": {"form": "regs", "kwarps": 4, "r16": R16_PLAIN, MEMORY_ALONE: "regs_fold"},
    "kw8 plain": {"kwarps": 8, "form": "plain", "r16": {"kwarps": 8, "form": "plain", "tiles": 1}},
    "kw8 bulk": {"kwarps": 8, "form": "bulk", "r16": {"kwarps": 8, "form": "bulk", "tiles": 1}},
    "kw8 plain tile": {"kwarps": 8, "form": "plain", "layout": "tile",
                       "r16": {"kwarps": 8, "form": "plain", "tiles": 1}},
    # the launches of the fewest rows in the xring form (mma_tiling.Few; the sweep of the
    # thirty-second session had it fastest at one row on qkv and down, slowest at eight), up to
    # 1, 2 or 4 rows; "no few": every shape's shipped entry without its "few"
    "no few": {},
    "few xring 1": {"few": {"form": "xring", "upto": 1}},
    "few xring 2": {"few": {"form": "xring", "upto": 2}},
    "few xring 4": {"few": {"form": "xring", "upto": 4}},
    # ... at one row in rings of 3 or 2, spread padded to its share (true) or not spread, the
    # next kernel let launch once the weights are read (the rest as each shape's entry)
    "few xring s3": {"few": {"form": "xring", "stages": 3}},
    "few xring s2": {"few": {"form": "xring", "stages": 2}},
    "few xring spread": {"few": {"form": "xring", "spread": True}},
    "few xring unspread": {"few": {"form": "xring", "spread": False}},
    "few xring read": {"few": {"form": "xring", "trigger": "read"}},
    # 16 rows with K in splits and one warp a tile: a block's 4 (or 8: two tiles a warp) tiles
    # share one split's x, so x's L2 reads fall from each SM reading all of x (every block a tile
    # over the whole K) to a split's share a block (x16: run them with --ms 16; fewer rows get
    # the splits too). The spread launches' padding leaves L1 ~28 KiB, against 32 KiB of x a
    # K quarter at 16 rows (twenty-ninth session)
    "x16 k2 kw1": {"splits": 2, "r16": {"kwarps": 1, "form": "plain", "tiles": 1}},
    # spread launches padded the least (mma_gemv.spread_blocks_bytes least): the share's blocks
    # fill the least shared memory, so the driver may leave more of the multiprocessor to L1
    "spread least": {"spread": "least"},
    "x16 k4 kw1": {"splits": 4, "r16": {"kwarps": 1, "form": "plain", "tiles": 1}},
    "x16 k2 kw1 t2": {"splits": 2, "r16": {"kwarps": 1, "form": "plain", "tiles": 2}},
    "x16 k4 kw1 t2": {"splits": 4, "r16": {"kwarps": 1, "form": "plain", "tiles": 2}},
    "x16 k8 kw1 t2": {"splits": 8, "r16": {"kwarps": 1, "form": "plain", "tiles": 2}},
    "x16 k4 kw2 t2": {"splits": 4, "r16": {"kwarps": 2, "form": "plain", "tiles": 2}},
    "x16 k4 kw1 t2 bulk": {"splits": 4, "r16": {"kwarps": 1, "form": "bulk", "tiles": 2}},
    # 16 rows (--ms 16): the second set's x never loaded, or its MMAs not issued (BUILD_OPTIONS): if the
    # first is as fast as 8 rows, x's loads are what 16 rows cost (thirty-third session)
    "r16 x once": {BUILD_OPTIONS: {"r16_diag": 1}},
    "r16 one set": {BUILD_OPTIONS: {"r16_diag": 2}},
    # ... and the 16-row kernels held to fewer registers (x once took 80-128 against 117-150):
    # budgeted for 20 or 24 warps a multiprocessor (build_cubin r16_warps; they spill)
    "r16 regs 20": {BUILD_OPTIONS: {"r16_warps": 20}},
    "r16 regs 24": {BUILD_OPTIONS: {"r16_warps": 24}},
    # every launch never waiting for the one before (build_cubin no_wait: no griddepcontrol.wait,
    # the sums undefined): the ceiling of any faster handoff than the grid's end (thirty-fourth)
    "no wait": {BUILD_OPTIONS: {"no_wait": True}},
    # ... and the memory side alone so (MEMORY_ALONE): the streaming's own ceiling, no dependency
    "ring no wait": {MEMORY_ALONE: True, BUILD_OPTIONS: {"no_wait": True}},
    # x loaded for a warp's first superstep only (build_cubin x_once; the sums wrong), with the
    # wait and without, and the memory side alone so: what x's loads a superstep cost at 1, 8
    # and 16 rows (a form that read x once an SM could give back at most that)
    "x once": {BUILD_OPTIONS: {"x_once": True}},
    "x once no wait": {BUILD_OPTIONS: {"x_once": True, "no_wait": True}},
    "ring x once no wait": {MEMORY_ALONE: True, BUILD_OPTIONS: {"x_once": True, "no_wait": True}},
    # x loaded every superstep, always the first one's pieces (build_cubin x_same): L1 hits, so
    # against "x once", x's L2 traffic apart from its L1 work
    "x same": {BUILD_OPTIONS: {"x_same": True}},
    # the wgmma forms (thirty-fifth session): x read once a block, the weights copied as the plain
    # or the bulk form copies them, in as many warps as shipped or twice as many
    "wg": wg_variant("wg", WG_SPLITS),
    "wg bulk": wg_variant("wg_bulk", WG_SPLITS),
    "wg k2": wg_variant("wg", WG_SPLITS_2),
    "wg bulk k2": wg_variant("wg_bulk", WG_SPLITS_2),
    # ... and x staged once (superstep 0's, every superstep computed from it) or staged every
    # superstep from superstep 0's pieces (L1 hits): what x's staging costs the wgmma form
    "wg x once": {**wg_variant("wg", WG_SPLITS), BUILD_OPTIONS: {"x_once": True}},
    "wg x same": {**wg_variant("wg", WG_SPLITS), BUILD_OPTIONS: {"x_same": True}},
    # ... and in rings of 8: a warp's weights further ahead, against the block's lockstep
    "wg deep": {**wg_variant("wg", WG_SPLITS), "stages": 8},
    "wg bulk deep": {**wg_variant("wg_bulk", WG_SPLITS), "stages": 8},
    # ... and x loaded two supersteps ahead of its staging (one: as built)
    "wg x ahead": {**wg_variant("wg", WG_SPLITS), BUILD_OPTIONS: {"wg_x_ahead": 2}},
    # the natural build's wgmma forms (thirty-sixth session, not yet timed): x copied into the
    # warpgroup's ring of stages as it lies, with the weights' copies and as far ahead, in the
    # splits of "wg" ("wgn"), and K shared by 2 or 4 warpgroups a block instead of splits
    "wgn": wg_variant("wg", WG_SPLITS, 1, "natural"),
    "wgn bulk": wg_variant("wg_bulk", WG_SPLITS, 1, "natural"),
    "wgn kw2": wg_variant("wg", WG_SPLITS_KW2, 2, "natural"),
    "wgn kw4": wg_variant("wg", WG_SPLITS_KW4, 4, "natural"),
    "wgn bulk kw4": wg_variant("wg_bulk", WG_SPLITS_KW4, 4, "natural"),
    # ... with x copied by TMA (one thread's two copies a superstep onto a barrier a stage, no
    # proxy fence): whether the per-thread copies' fence costs the cp.async form its lead
    "wgn tma": wg_variant("wg_tma", WG_SPLITS, 1, "natural"),
    "wgn tma kw2": wg_variant("wg_tma", WG_SPLITS_KW2, 2, "natural"),
    "wgn tma kw4": wg_variant("wg_tma", WG_SPLITS_KW4, 4, "natural"),
    "wgn bulk tma kw4": wg_variant("wg_bulk_tma", WG_SPLITS_KW4, 4, "natural"),
}


def sweep_variants(kwarps: list) -> dict:
    """``--sweep``: every form and memory order at these warps a tile (the 16-row launch as
    shipped)."""
    from hinge_nvfp4.mma_gemv import KERNELS
    from hinge_nvfp4.mma_layout import LAYOUTS

    return {"shipped": None} | {f"kw{kw} {form} {layout}": {"kwarps": kw, "form": form, "layout": layout}
                                for kw in kwarps for form in KERNELS for layout in LAYOUTS}


def sweep16_variants(from_rows: int = 9) -> dict:
    """``--sweep16``: every 16-row launch (warps a tile, GEMV form, tiles a warp where built) over
    the shipped launch of fewer rows, taking ``from_rows`` rows on (``--from-rows``)."""
    from hinge_nvfp4.mma_gemv import KERNELS, KWARPS, WIDE_WARPS, two_tiles_built

    return {"shipped": None} | {
        f"r16 kw{kw} {form} t{tiles}": {"r16": {"kwarps": kw, "form": form, "tiles": tiles, "from": from_rows}}
        for kw in KWARPS + (WIDE_WARPS,) for form in KERNELS for tiles in (1, 2)
        if tiles == 1 or (kw != WIDE_WARPS and two_tiles_built(form, 4, kw))}


def variant_plan(shipped: dict, change: dict) -> dict:
    """The tilings file of a variant: every shape's shipped entry in a ring of 4 and without its
    form of the fewest rows (``"few"``, unless the change names one), then changed, then by its
    own ``PER_SHAPE`` change (``MEMORY_ALONE`` and ``BUILD_OPTIONS`` are not a tiling's: left out)."""
    per_shape = change.get(PER_SHAPE, {})
    change = {key: value for key, value in change.items() if key not in (MEMORY_ALONE, BUILD_OPTIONS, PER_SHAPE)}
    return {shape: {**{key: value for key, value in entry.items() if key != "few"}, "stages": 4, **change,
                    **per_shape.get(shape, {})}
            for shape, entry in shipped.items()}


def diagnostic_cubins(options: dict | None):
    """Within it, ``mma_gemv.cached_cubin`` gives ``build_cubin(**options)``'s builds (a
    variant's ``BUILD_OPTIONS``; in memory, never on disk, one a process and option set:
    ``DIAGNOSTIC_BUILDS``, ``nvfp4_gemm.cubins_built``): a launcher made inside keeps it; no
    options change nothing."""
    return cubins_built(lambda call: options, DIAGNOSTIC_BUILDS) if options else contextlib.nullcontext()


DIAGNOSTIC_BUILDS: dict = {}  #: diagnostic_cubins' builds by build_cubin's arguments


def memory_alone(kernel, layers: list, form: str = "ring") -> list:
    """``layers`` (as ``layers_of`` prepared them) launched at fewer than 9 rows by the diagnostic
    ``form`` of their own launcher's cubin, tiling and launch (``MEMORY_ALONE``): the launcher
    ``kernel`` itself would build for that tiling (its private ``_gemv``: a diagnostic, never the
    engine's)."""
    for layer in layers:
        layer.nvfp4_mma_gemv = layer.nvfp4_mma_gemv_few = ring = kernel._gemv(layer.nvfp4_mma_tiling._replace(form=form))
        if layer.nvfp4_mma_tiling.splits > 1:  # (as prepare_linear reserves them for its own)
            ring.reserve_counters(layer.nvfp4_mma_row_scale.shape[0] // 16, layer.nvfp4_mma_row_scale.device)
    return layers


def kernels(tmp: str, variants: dict, columns: tuple = (None,)) -> dict:
    """A ``kernel: mma`` object a variant (label -> change, as ``VARIANTS``) and column map of
    ``columns`` (None: the file's; else every shape's entry names it), each reading its own
    tilings file."""
    from hinge_nvfp4 import mma_tiling
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.options import NVFP4Options

    # NOTE: a file named by $HINGE_NVFP4_MMA_PLAN is the base ("shipped") of every variant (it
    # was popped unread before 2026-12-07: h200n's "H100 file" rows ran the H200's file)
    base = os.environ.pop("HINGE_NVFP4_MMA_PLAN", None)
    shipped = (mma_tiling.tuned_tilings(base) if base else
               mma_tiling.tuned_tilings(device_name=torch.cuda.get_device_name())) or {}
    out = {}
    for label, change in variants.items():
        for i, cols in enumerate(columns):
            name = label if i == 0 else f"{label} {cols}"
            if cols is not None:
                change = {**(change or {}), "columns": cols}
            os.environ.pop("HINGE_NVFP4_MMA_PLAN", None)
            if base and change is None:
                os.environ["HINGE_NVFP4_MMA_PLAN"] = base
            if change is not None:  # (kept in --keep-plans when given)
                path = os.path.join(tmp, f"{name.replace(' ', '_')}.json")
                with open(path, "w") as f:
                    json.dump(variant_plan(shipped, change), f)
                os.environ["HINGE_NVFP4_MMA_PLAN"] = path
            options = (change or {}).get(BUILD_OPTIONS)
            with diagnostic_cubins(options):
                out[name] = MmaKernel(dequant_rows=NVFP4Options().prefill_dequant_rows)  # as the engine builds it
            out[name].build_options = options
            alone = (change or {}).get(MEMORY_ALONE)  # the diagnostic form, or None
            out[name].memory_alone = "ring" if alone is True else alone
    os.environ.pop("HINGE_NVFP4_MMA_PLAN", None)
    return out


def main(args) -> None:
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.mma_gemv import SET_ROWS

    if args.keep_plans:
        os.makedirs(args.keep_plans, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        chosen = {k: v for k, v in VARIANTS.items() if not args.variants or k in args.variants}
        variants = (sweep_variants(args.sweep) if args.sweep else sweep16_variants(args.from_rows) if args.sweep16
                    else chosen)
        by_variant = kernels(args.keep_plans or tmp, variants,
                             tuple(args.columns or (None,)))
    if args.sweep or args.sweep16:  # a column a variant is too wide: a line a variant
        sweep_lines(args, by_variant)
        return
    print(f"{'shape':8} {'M':>3} {'clock':7} {'bf16':>7} " + " ".join(f"{label:>15}" for label in by_variant))
    for label, (n, k) in shapes_of(args.shapes):
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
        quant = [fp4.quantize_weight(w) for w in ws]
        layers = {}
        for name, kernel in by_variant.items():
            with diagnostic_cubins(kernel.build_options):
                layers[name] = layers_of(kernel, quant, n)
        for name, kernel in by_variant.items():
            if kernel.memory_alone:
                memory_alone(kernel, layers[name], kernel.memory_alone)
        for m in args.ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            roof = (n * k // 2 + n * k // 16 + 2 * m * (k + n)) / (args.hbm_tbs * 1e12) * 1e6
            for clock, replays in (("replay", 0), ("steady", args.replays)):
                bf16 = graph_time(lambda i=0, x=x, ws=ws: torch.nn.functional.linear(x, ws[i]), args.iters, replays)
                cells = []
                for name, kernel in by_variant.items():
                    if kernel.memory_alone and m > SET_ROWS:  # (the diagnostic forms have no 16-row kernel)
                        cells.append(f"{'-':>15}")
                        continue
                    t = graph_time(lambda i=0, x=x, kn=kernel, ls=layers[name]: kn.linear(ls[i], x, None, None),
                                   args.iters, replays)
                    cells.append(f"{t:8.1f} ({100 * roof / t:3.0f}%)")
                print(f"{label.split()[0]:8} {m:>3} {clock:7} {bf16:7.1f} " + " ".join(cells), flush=True)
        del layers, quant


def sweep_lines(args, by_variant: dict) -> None:
    """``--sweep``: the shapes of ``--shapes`` at ``--ms``, steady clock, a line a variant, the
    fastest marked."""
    from hinge_nvfp4 import format as fp4

    for label, (n, k) in shapes_of(args.shapes):
        quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(ROTATE)]
        for m in args.ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            roof = (n * k // 2 + n * k // 16 + 2 * m * (k + n)) / (args.hbm_tbs * 1e12) * 1e6
            times = {}
            for name, kernel in by_variant.items():
                layers = layers_of(kernel, quant, n)
                times[name] = graph_time(lambda i=0, x=x, kn=kernel, ls=layers: kn.linear(ls[i], x, None, None),
                                         args.iters, args.replays)
            best = min(times, key=times.get)
            for name, t in times.items():
                print(f"{label.split()[0]:8} {m:>3} {name:28} {t:7.1f} us ({100 * roof / t:3.0f}%)"
                      f"{'  <- fastest' if name == best else ''}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--hbm-tbs", type=float, default=None)
    parser.add_argument("--keep-plans", help="a directory to write the variants' tilings files to")
    parser.add_argument("--sweep", type=int, nargs="*", metavar="KWARPS",
                        help="every form and memory order at these warps a tile instead of VARIANTS")
    parser.add_argument("--sweep16", action="store_true",
                        help="every 16-row launch (warps a tile, form, tiles a warp) instead of VARIANTS")
    parser.add_argument("--from-rows", type=int, default=9, help="--sweep16's launches take this many rows on")
    parser.add_argument("--shapes", nargs="+", choices=SHAPE_NAMES, help="the shapes to run (default all)")
    parser.add_argument("--columns", nargs="+", choices=("contiguous", "coalesced"),
                        help="column maps to run each variant in (default: the file's)")
    parser.add_argument("--variants", nargs="+", help="of VARIANTS (default: all)")
    args = parser.parse_args()
    args.hbm_tbs = start(args.hbm_tbs, f"; us a call (% of {{hbm}} TB/s), {ROTATE} weight copies in turn, "
                         "launched early")
    main(args)
