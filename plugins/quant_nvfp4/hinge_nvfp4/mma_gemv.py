"""NVFP4 decode GEMVs on the tensor cores (``mma_gemv.cu``, M <= 16 rows of x), and the weight
dequantized from the same repack for prefill sizes: its nvcc build (cached on disk) and a CUDA
driver-API launcher. The weights come in ``mma_layout``'s repack, a launch is cut by
``mma_tiling``. ``kernel = "mma"`` (``hinge_nvfp4.kernels.MmaKernel``; ``auto`` on sm_90 for a
bf16 model) runs them; ``tools/gpu/nvfp4_mma_probe.py`` times the GEMV against the Triton GEMV,
``tools/gpu/nvfp4_dequant.py`` the dequantization against Triton's.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from hinge_nvfp4.mma_layout import (
    COLUMN_MAPS,
    COLUMNS,
    REPACK_MAPS,
    SUPERSTEP,
    block_strides,
    check_map,
)

SOURCE = Path(__file__).with_name("mma_gemv.cu")
MAX_ROWS = 16  #: rows of x: the MMA's B columns, in sets of ``SET_ROWS``
SET_ROWS = 8  #: rows of one set (one MMA a decoded A fragment); more take the ``_r16`` kernels
WARPS = 4  #: warps a block (``WARPS`` in mma_gemv.cu)
#: warps a block of the cubins that hold the ``_kw8`` kernels (eight warps a tile, a block a
#: tile: a weight of few tiles gets twice ``_kw4``'s warps), their rings at most
#: ``WIDE_MAX_STAGES`` deep (8 warps' rings in 48 KiB); no two-tiles kernels in them
WIDE_WARPS = 8
WIDE_MAX_STAGES = 5
RING_STAGES = (4, 8)  #: the cp.async rings' depths (supersteps) ``MmaKernel`` builds
MAX_STAGES = 10  #: the rings of 4 warps in 48 KiB of static shared memory (1152 bytes a stage)
#: the L2 prefetch sizes a build may ask its copies for, or ``"run"``: a PDL build asks L2 for a
#: warp's whole run (past the ring's prologue) before ``griddepcontrol.wait``, as
#: tools/gpu/read_ceiling.py's PDL read asks for its bytes (``MMA_L2_RUN``; no hint on the copies)
PREFETCHES = (0, 64, 128, 256, "run")
PREFETCH = 0  #: the one ``MmaKernel`` builds
#: when a PDL build lets the kernel after it launch: once a warp's weights are read (``read``),
#: or at its start (``start``: ``MMA_TRIGGER_START``)
TRIGGERS = ("read", "start")
#: when a build reads its epilogue's row_scale: in the epilogue (``end``), at the kernel's start,
#: before ``griddepcontrol.wait`` (``start``), or just after the wait and x's first loads
#: (``wait``) (``MMA_ROW_SCALE`` 0, 1, 2; the last two held in registers through the loop)
ROW_SCALE_READS = ("end", "start", "wait")
#: the diagnostic builds of what a 16-row kernel's second set costs (``build_cubin r16_diag``,
#: ``MMA_R16_DIAG``): 0 the GEMV, 1 set 1's x never loaded (set 0's registers again), 2 set 1's
#: MMAs not issued (its x loaded and kept as bits): their sums are wrong
R16_DIAGS = (0, 1, 2)
#: the warps a multiprocessor a build's 16-row kernels budget registers for (``build_cubin
#: r16_warps``, ``MMA_R16_WARPS``): 16 the GEMV's (128 a thread), 20 and 24 diagnostics (102, 80)
R16_WARPS = (16, 20, 24)
#: ``MmaGemv`` spread: not spread, padded to the multiprocessor's share, or padded the least
SPREADS = (False, True, "least")

#: the kernel's forms: reading a superstep out of the ring at its top, one superstep ahead, at
#: its top with x in the ring too (dynamic shared memory: ``MmaGemv`` sizes it), or with the
#: ring filled by Hopper's bulk copies (lane 0 two a superstep, an mbarrier a slot)
KERNELS = {"plain": "nvfp4_mma_gemv", "ahead": "nvfp4_mma_gemv_ahead", "xring": "nvfp4_mma_gemv_xring",
           "bulk": "nvfp4_mma_gemv_bulk"}
X_RING_BYTES = 256  #: x bytes a row, a superstep, a warp in the xring form's ring
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
#: two diagnostics, no GEMV: the memory side alone (the math a XOR fold; also at ``WIDE_WARPS``
#: warps a tile) and the arithmetic alone (every superstep from one copied once);
#: ``nvfp4_mma_probe.py --diagnose`` and ``nvfp4_launch_chain.py``'s ``ring`` variants time them
DIAGNOSTICS = {"ring": "nvfp4_mma_gemv_ring", "math": "nvfp4_mma_gemv_math"}
#: GEMV forms built for x of up to ``SET_ROWS`` rows alone, in the cubins of ``WARPS`` warps a
#: block: ``regs``, no ring in shared memory: each lane loads its own pieces of each superstep
#: straight into registers, eight supersteps in flight, a warp's first eight all before
#: ``griddepcontrol.wait`` (as tools/gpu/read_ceiling.py's read launched with PDL), then the
#: same MMAs as ``plain``
ONE_SET = {"regs": "nvfp4_mma_gemv_regs"}
#: the register form's memory side alone (its loads, a XOR fold for the math; no GEMV), built
#: beside it: ``nvfp4_launch_chain.py``'s ``regs fold`` variants
REGS_DIAGNOSTICS = {"regs_fold": "nvfp4_mma_gemv_regs_fold"}
#: the wgmma forms, built only by ``build_cubin(wg=True)`` (``MMA_WG``, sm_90a; measured slower
#: than the shipped launches on every shape, docs/nvfp4.md, thirty-fifth session, so no shipped
#: tilings file names them): a block one warpgroup, its four warps four tiles over one split's
#: supersteps, x loaded once a block into shared memory (each warp a quarter of it) and read from
#: there by ``wgmma`` (A the warps' decoded fragments in registers), the weights copied as the
#: ``plain`` form's (``wg``) or the ``bulk`` form's (``wg_bulk``); one warp a tile, one tile a
#: warp, K cut by splits alone; up to ``SET_ROWS`` rows and an ``_r16`` kernel. Built for the
#: ``natural`` column map (``build_cubin(columns="natural", wg=True)``: a cubin of these forms and
#: the dequantizing kernels alone) they copy x into shared memory as it lies in memory, with the
#: weights' copies and as far ahead, and ``WG_KWARPS`` warpgroups a block may share K (``_kw2``,
#: ``_kw4``: a tile's warps, one a warpgroup, their sums added in shared memory), all their
#: shared memory dynamic (``wg_shared_bytes``); not timed yet. ``WG_TMA_FORMS`` (natural build
#: alone): x's stages filled by a warpgroup's one thread with two TMA copies a superstep (a tensor
#: map of x the launcher makes, the 128-byte swizzle, rows past M zeros) onto a barrier a stage
WG_FORMS = {"wg": "nvfp4_mma_gemv_wg", "wg_bulk": "nvfp4_mma_gemv_wg_bulk",
            "wg_tma": "nvfp4_mma_gemv_wg_tma", "wg_bulk_tma": "nvfp4_mma_gemv_wg_bulk_tma"}
WG_TMA_FORMS = ("wg_tma", "wg_bulk_tma")  #: the wgmma forms whose x is copied by TMA (natural build alone)
WG_KWARPS = (1, 2, 4)  #: warps a tile (warpgroups a block) of the natural build's wgmma forms
NATURAL = "natural"  #: the column map the wgmma forms alone read (``mma_layout.REPACK_MAPS``)
KWARPS = (1, 2, 4)  #: warps a 16-row tile, each a run of the split's supersteps (sums added in shared memory)
#: the forms built with two tiles a warp at 16 rows (``_t2``: x's fragments feed both tiles),
#: in cubins of rings at most ``T2_MAX_STAGES`` deep (two tiles' rings in 48 KiB)
T2_FORMS = ("plain", "bulk")
T2_MAX_STAGES = 4
#: the kernels every cubin holds that write the weight itself in bf16 (``MmaGemv.dequantize``):
#: a warp a (tile, superstep) block, stored from registers, or ``DQ_BLOCKS`` blocks a warp, their
#: loads first, each stored through shared memory in whole 256-byte row pieces
DEQUANTS = {"direct": "nvfp4_mma_dequant", "staged": "nvfp4_mma_dequant_staged"}
DQ_BLOCKS = 4  #: blocks a warp of the staged form (``DQ_BLOCKS`` in mma_gemv.cu)
DEQUANT_FORM = "staged"  #: the form ``dequantize`` launches unless told (H100: 82-84% of peak, direct 47-52%)


def two_tiles_built(form: str, stages: int | None, kwarps: int = 1) -> bool:
    """Whether a cubin of ``stages`` holds ``form``'s two-tiles-a-warp kernels (``_t2``) of
    ``kwarps`` warps a tile."""
    return form in T2_FORMS and stages is not None and stages <= T2_MAX_STAGES and kwarps in KWARPS


def ring_built(stages: int) -> bool:
    """Whether nvcc builds a cp.async ring of ``stages`` supersteps (2 .. ``MAX_STAGES``: static
    shared memory)."""
    return 2 <= stages <= MAX_STAGES


def kwarps_built(kwarps: int, stages: int) -> bool:
    """Whether a cubin of ``stages`` holds the kernels of ``kwarps`` warps a tile (``KWARPS``, or
    ``WIDE_WARPS`` in rings of at most ``WIDE_MAX_STAGES``)."""
    return kwarps in KWARPS or (kwarps == WIDE_WARPS and stages <= WIDE_MAX_STAGES)


def block_warps(kwarps: int, form: str = "plain") -> int:
    """Warps a block of ``form``'s kernel of ``kwarps`` warps a tile: a ``WG_FORMS`` block is
    ``kwarps`` warpgroups of four tiles, any other a block of the cubin that holds it
    (``cubin_warps``)."""
    return 4 * kwarps if form in WG_FORMS else cubin_warps(kwarps, form)


def cubin_warps(kwarps: int, form: str = "plain") -> int:
    """``build_cubin``'s ``warps`` of the cubin that holds ``form``'s kernel of ``kwarps`` warps a
    tile: ``WIDE_WARPS`` for eight, else ``WARPS`` (the wgmma forms' too, at any ``kwarps``)."""
    return WIDE_WARPS if kwarps == WIDE_WARPS and form not in WG_FORMS else WARPS


def wg_shared_bytes(kwarps: int, stages: int, rows: int) -> int:
    """Dynamic shared memory of a block of the natural build's wgmma kernel of ``kwarps``
    warpgroups, rings of ``stages``, for x of up to ``rows`` rows (mma_gemv.cu's ``WgRings``):
    each warp's rings of codes and scale words (1152 bytes a superstep) and barriers (8 bytes a
    slot), each warpgroup's ring of x stages (2 KiB a set of eight rows a superstep) and their
    barriers (8 bytes a stage, the TMA forms')."""
    sets = 2 if rows > SET_ROWS else 1
    return kwarps * stages * (4 * (1024 + 128 + 8) + sets * 2048 + 8)


WG_MAX_SHARED = 232448  #: dynamic shared memory a Hopper block may ask for (227 KiB)


def check_columns(form: str, kwarps: int, columns: str, stages: int | None = None) -> None:
    """Refuses ``form`` at ``kwarps`` warps a tile over weights in column map ``columns`` (rings
    of ``stages``, where given) where no cubin holds it: the natural map is read by the wgmma
    forms alone, their warpgroups share K in its build alone, and a block's rings must fit a
    Hopper block's shared memory (``wg_shared_bytes`` at 16 rows)."""
    check_map(columns)
    if columns == NATURAL and form not in WG_FORMS:
        raise ValueError(f"the {NATURAL} column map is read by the wgmma forms alone ({', '.join(WG_FORMS)}), "
                         f"not {form}: name one of them, or repack in {' or '.join(COLUMN_MAPS)}")
    if form in WG_FORMS and kwarps != 1 and columns != NATURAL:
        raise ValueError(f"the {form} form's warpgroups share K ({kwarps} warps a tile) in the {NATURAL} "
                         f"column map alone, not {columns}: repack in {NATURAL}, or take one warp a tile")
    if form in WG_TMA_FORMS and columns != NATURAL:
        raise ValueError(f"the {form} form copies x by TMA into the {NATURAL} map's stages, not {columns}'s: "
                         f"repack in {NATURAL}, or name {form.removesuffix('_tma')}")
    if columns == NATURAL and stages is not None and wg_shared_bytes(kwarps, stages, MAX_ROWS) > WG_MAX_SHARED:
        fits = max(s for s in range(1, stages) if wg_shared_bytes(kwarps, s, MAX_ROWS) <= WG_MAX_SHARED)
        raise ValueError(f"the {form} form at {kwarps} warps a tile in rings of {stages} asks "
                         f"{wg_shared_bytes(kwarps, stages, MAX_ROWS)} bytes of shared memory a block at 16 rows, "
                         f"more than a Hopper block's {WG_MAX_SHARED}: take rings of at most {fits}")


def kernel_name(form: str, kwarps: int = 1, rows: int = SET_ROWS, tiles: int = 1) -> str:
    """The cubin's function of ``form`` (``KERNELS``, ``ONE_SET``, ``DIAGNOSTICS``,
    ``REGS_DIAGNOSTICS`` or ``WG_FORMS``, the last at one warp a tile) with ``kwarps`` warps a
    tile for x of at most ``rows`` rows (``SET_ROWS``, or ``MAX_ROWS``: a ``KERNELS`` or
    ``WG_FORMS`` form's ``_r16`` kernel, two sets of MMA columns), ``tiles`` 16-row tiles a warp
    (2: ``_t2``, 16 rows and ``T2_FORMS`` only)."""
    names = KERNELS | ONE_SET | DIAGNOSTICS | REGS_DIAGNOSTICS | WG_FORMS
    if form not in names:
        raise ValueError(f"no form {form!r} of the MMA GEMV; the forms are {', '.join(names)}")
    if form in WG_FORMS and (kwarps not in WG_KWARPS or tiles != 1):
        raise ValueError(f"the {form} form runs {', '.join(map(str, WG_KWARPS))} warps a tile (one a "
                         f"warpgroup; past one in the {NATURAL} build) and one tile a warp, "
                         f"not {kwarps} warps a tile, {tiles} tiles a warp")
    if kwarps not in KWARPS + (WIDE_WARPS,) or (kwarps == WIDE_WARPS and form not in (*KERNELS, "ring")):
        raise ValueError(f"the MMA GEMV runs {', '.join(map(str, KWARPS))} warps a tile, or {WIDE_WARPS} "
                         f"in its {', '.join(KERNELS)} and ring forms, not {kwarps} ({form})")
    sixteen = form in KERNELS or form in WG_FORMS  # (forms with an _r16 kernel)
    if rows not in (SET_ROWS, MAX_ROWS) or (rows > SET_ROWS and not sixteen):
        raise ValueError(f"the MMA GEMV's {form} form is built for {SET_ROWS}"
                         f"{f' or {MAX_ROWS}' if sixteen else ''} rows of x, not {rows}")
    if tiles not in (1, 2) or (tiles == 2 and (rows != MAX_ROWS or form not in T2_FORMS or kwarps == WIDE_WARPS)):
        raise ValueError(f"two tiles a warp are built for {MAX_ROWS} rows in the "
                         f"{' and '.join(T2_FORMS)} forms; got {tiles} tiles, {rows} rows, {form}")
    return (names[form] + ("" if kwarps == 1 else f"_kw{kwarps}") + ("_r16" if rows > SET_ROWS else "")
            + ("_t2" if tiles == 2 else ""))


def build_cubin(arch: str = "sm_90", stages: int = 4, prefetch: int = 0, pdl: bool = False,
                warps: int = WARPS, columns: str = COLUMNS, trace: bool = False, trigger: str = "read",
                wait_first: bool = False, row_scale: str = "end", r16_diag: int = 0,
                r16_warps: int = 16, no_wait: bool = False, x_once: bool = False,
                x_same: bool = False, wg: bool = False, wg_x_ahead: int = 1) -> bytes:
    """``mma_gemv.cu`` compiled by nvcc for ``arch``, its cp.async ring ``stages`` supersteps
    deep (2 .. ``MAX_STAGES``), its copies asking L2 to fetch ``prefetch`` bytes around each
    (``L2_PREFETCH``: 0 for no hint, 64, 128, 256), ``pdl``: for programmatic dependent launch
    (``MMA_PDL``: the weights' first copies before ``griddepcontrol.wait``, x after it, through
    coherent loads; sm_90 and later), ``warps`` a block (``WARPS``, or ``WIDE_WARPS``: the ``_kw8``
    kernels, rings of at most ``WIDE_MAX_STAGES``), for weights repacked in column map ``columns``
    (``MMA_COALESCED``; ``mma_layout.COLUMN_MAPS``, or ``NATURAL`` with ``wg``: ``MMA_NATURAL``, a
    cubin of the ``WG_FORMS`` kernels, at 1, 2 and 4 warpgroups a block, and the dequantizing
    kernels alone); ``trace``: a diagnostic build whose warps
    record their timelines (``MMA_TRACE``; ``tools/gpu/nvfp4_trace.py``; never cached or
    launched by the engine); ``trigger``: when a ``pdl`` build lets the kernel after it launch
    (``TRIGGERS``); ``wait_first``: a diagnostic ``pdl`` build whose cp.async forms wait before
    their prologue's copies, not after (``MMA_WAIT_FIRST``; ``nvfp4_trace.py --wait-first``; never
    cached or launched by the engine); ``row_scale``: when the epilogue's row_scale is read
    (``ROW_SCALE_READS``: ``MMA_ROW_SCALE``; where a tuned tiling names ``"row_scale"``,
    ``mma_tiling.Tiling``; ``nvfp4_trace.py --row-scale``); ``r16_diag``: a diagnostic build of
    what the 16-row kernels' second set costs, their sums wrong (``R16_DIAGS``: ``MMA_R16_DIAG``;
    ``nvfp4_launch_chain.py``'s ``r16 ...`` variants; never cached or launched by the engine);
    ``r16_warps``: the warps a multiprocessor the 16-row kernels' registers are budgeted for
    (``MMA_R16_WARPS``: 16, 128 registers a thread; the diagnostic 20 or 24 hold them to 102 or
    80, spilling; never cached or launched by the engine); ``no_wait``: a diagnostic ``pdl`` build
    that never waits for the kernel before (``MMA_NO_WAIT``: no ``griddepcontrol.wait``, x read
    while that kernel may still write it, the sums undefined; ``nvfp4_launch_chain.py``'s ``no
    wait`` variant: what the wait costs back to back; never cached or launched by the engine);
    ``x_once``: a diagnostic build whose GEMV and ring forms load x for a warp's first superstep
    only and compute every superstep with it (``MMA_X_ONCE``; the xring form's ring of x is
    unchanged; the sums wrong; ``nvfp4_launch_chain.py``'s ``x once ...`` variants: what x's
    loads a superstep cost; never cached or launched by the engine); ``x_same``: likewise, x
    loaded every superstep as the GEMV loads it but always the first superstep's pieces
    (``MMA_X_SAME``: L1 hits past the first, so x's L2 traffic is gone and its L1 work kept;
    ``x same``); ``wg``: the ``WG_FORMS`` kernels too (``MMA_WG``: ``wgmma`` is sm_90a's, so
    ``arch`` sm_90 is built as sm_90a, which runs on sm_90 cards alone; a launcher of a tiling
    that names a ``WG_FORMS`` form gets this build); ``wg_x_ahead``: the supersteps those forms
    load x ahead of staging it (``MMA_WG_X_AHEAD``: 1, or 2 in an even ring; a diagnostic of x's
    latency, never cached); needs nvcc on PATH."""
    if warps not in (WARPS, WIDE_WARPS) or (warps == WIDE_WARPS and stages > WIDE_MAX_STAGES):
        raise ValueError(f"the MMA GEMV is built with {WARPS} warps a block, or {WIDE_WARPS} with rings of "
                         f"at most {WIDE_MAX_STAGES} stages; got {warps} warps, {stages} stages")
    if not ring_built(stages):
        raise ValueError(f"the cp.async ring takes 2 to {MAX_STAGES} stages (static shared "
                         f"memory), got {stages}")
    if prefetch not in PREFETCHES:
        raise ValueError(f"the copies' L2 prefetch is one of {PREFETCHES} bytes, got {prefetch}")
    if columns not in REPACK_MAPS:
        raise ValueError(f"the MMA GEMV is built for the column maps {', '.join(REPACK_MAPS)}, not {columns!r}")
    if columns == NATURAL and (not wg or x_once or x_same or wg_x_ahead != 1):
        raise ValueError(f"a {NATURAL} build holds the wgmma forms alone (wg=True), which copy x into "
                         "shared memory as it lies: x_once, x_same and wg_x_ahead (diagnostics of x "
                         "staged through registers) do not apply")
    if wait_first and not pdl:
        raise ValueError("wait_first moves griddepcontrol.wait, which only a pdl=True build has")
    if no_wait and (not pdl or wait_first):
        raise ValueError("no_wait drops griddepcontrol.wait, which only a pdl=True build has (and "
                         "wait_first moves it): build with pdl=True and wait_first=False")
    if x_once and x_same:
        raise ValueError("x_once and x_same are two diagnostics of x's loads (none after the first "
                         "superstep, or the first one's again): build one at a time")
    if wg and arch not in ("sm_90", "sm_90a"):
        raise ValueError(f"the wgmma forms are built for sm_90a (Hopper's wgmma), not {arch}")
    if wg_x_ahead not in (1, 2) or (wg_x_ahead == 2 and stages % 2):
        raise ValueError(f"the wgmma forms load x 1 superstep ahead, or 2 in a ring of an even depth; "
                         f"got {wg_x_ahead} in a ring of {stages}")
    arch = "sm_90a" if wg else arch
    if row_scale not in ROW_SCALE_READS:
        raise ValueError(f"the MMA GEMV reads its row_scale at one of {', '.join(ROW_SCALE_READS)}, not {row_scale!r}")
    if r16_diag not in R16_DIAGS:
        raise ValueError(f"r16_diag is one of {R16_DIAGS} (0 the GEMV; 1 set 1's x not loaded; 2 set 1's "
                         f"MMAs not issued), not {r16_diag!r}")
    if r16_warps not in R16_WARPS:
        raise ValueError(f"r16_warps budgets 16 (the GEMV), 20 or 24 warps a multiprocessor, not {r16_warps!r}")
    if trigger not in TRIGGERS:
        raise ValueError(f"the MMA GEMV lets the next kernel launch at one of {', '.join(TRIGGERS)}, not {trigger!r}")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH: hinge_nvfp4's MMA GEMV kernels compile with "
                                "it (install the CUDA toolkit, or use kernel=triton)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "nvfp4_mma_gemv.cubin"
        done = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-O3", f"-DSTAGES={stages}",
                               f"-DL2_PREFETCH={0 if prefetch == 'run' else prefetch}", f"-DMMA_L2_RUN={int(prefetch == 'run')}",
                               f"-DMMA_PDL={int(pdl)}",
                               f"-DWARPS={warps}", f"-DMMA_COALESCED={int(columns == 'coalesced')}",
                               f"-DMMA_NATURAL={int(columns == NATURAL)}", f"-DMMA_TRACE={int(trace)}",
                               f"-DMMA_TRIGGER_START={int(trigger == 'start')}", f"-DMMA_WAIT_FIRST={int(wait_first)}",
                               f"-DMMA_ROW_SCALE={ROW_SCALE_READS.index(row_scale)}", f"-DMMA_R16_DIAG={r16_diag}",
                               f"-DMMA_R16_WARPS={r16_warps}", f"-DMMA_NO_WAIT={int(no_wait)}",
                               f"-DMMA_X_ONCE={int(x_once)}", f"-DMMA_X_SAME={int(x_same)}", f"-DMMA_WG={int(wg)}", f"-DMMA_WG_X_AHEAD={wg_x_ahead}",
                               "-o", str(out),
                               str(SOURCE)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc could not build {SOURCE.name} for {arch} (STAGES={stages}), exit "
                               f"{done.returncode}:\n{done.stderr[-2000:]}\nuse kernel=triton meanwhile")
        return out.read_bytes()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hinge/nvfp4_mma`` (``~/.cache/...``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hinge" / "nvfp4_mma"


def cached_cubin(arch: str, stages: int = 4, cache_dir: Path | None = None,
                 prefetch: int | None = None, pdl: bool = False, warps: int = WARPS,
                 columns: str = COLUMNS, trigger: str = "read", row_scale: str = "end",
                 wg: bool = False) -> bytes:
    """``build_cubin``, kept on disk under a key of the source and every build option (prefetch
    default ``PREFETCH``; nvcc takes a few seconds; a start-up should not pay it twice)."""
    prefetch = PREFETCH if prefetch is None else prefetch
    options = (f"{arch}:{stages}:{prefetch}:{pdl}:{warps}" + ("" if columns == "contiguous" else f":{columns}")
               + ("" if trigger == "read" else f":{trigger}") + ("" if row_scale == "end" else f":rs-{row_scale}")
               + (":wg" if wg else ""))
    key = hashlib.sha256(SOURCE.read_bytes() + options.encode()).hexdigest()[:24]
    path = (cache_dir or default_cache_dir()) / f"mma_gemv-{arch}-{stages}-{key}.cubin"
    if path.exists():
        return path.read_bytes()
    cubin = build_cubin(arch, stages, prefetch, pdl, warps, columns, trigger=trigger, row_scale=row_scale, wg=wg)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(cubin)
    partial.replace(path)  # atomic: a concurrent start-up reads a whole file or builds its own
    return cubin


class MmaGemv:
    """The compiled kernel, loaded through the CUDA driver API into torch's current context and
    launched on torch's current stream (so a CUDA graph captures it). ``stages``: the cubin's
    ring depth, which the xring form needs to size its dynamic shared memory; ``kwarps``: warps
    a 16-row tile (``KWARPS``: a block of ``WARPS`` holds ``WARPS // kwarps`` tiles; or
    ``WIDE_WARPS``: a block a tile, from a cubin built with ``warps=WIDE_WARPS``; a ``WG_FORMS``
    block is four tiles of ``kwarps`` warpgroups, ``block_warps``). A GEMV
    form loads two functions: x of up to ``SET_ROWS`` rows, and of up to ``MAX_ROWS``
    (``_r16``); a launch takes the one for its rows. ``carveout``: the share of the unified L1
    and shared memory (percent, 0 .. 100) the kernels prefer as shared memory, a hint to the
    driver (None: its own choice); the rest caches x, which every warp reads whole (the probe's
    --carveout: no effect on an H100, 2026-12-06).
    ``tiles16``: 16-row tiles a warp computes at 9 .. 16 rows of x (2: the ``_t2`` kernels,
    each x fragment loaded once for two tiles; ``T2_FORMS`` in a cubin of at most
    ``T2_MAX_STAGES`` stages). ``rows16_from``: the fewest rows of x the ``_r16`` kernel takes
    (1 .. ``SET_ROWS + 1``; below ``SET_ROWS + 1`` its second set of MMAs computes nothing, but
    its launch may be the faster). ``columns``: the column map the cubin was built for (its
    weights must be repacked in it: ``mma_layout.repack(..., columns)``).

    ``spread``: a launch's blocks spread evenly over the multiprocessors: each asks for enough
    (unused) dynamic shared memory that no multiprocessor holds more than ``ceil(blocks /
    multiprocessors)`` of them (``spread_bytes``): True as much as leaves room for that many,
    ``"least"`` the fewest bytes that keep it to that many (``spread_blocks_bytes`` least). Without it the block scheduler places a
    launch that starts while the one before drains on the multiprocessors that emptied first,
    up to as many as registers allow, and those finish last: with three of down's eight-warp
    blocks where most hold two, their warps end ~3 us after the rest (H100, 2026-12-06,
    ``tools/gpu/nvfp4_trace.py``; docs/nvfp4.md)."""

    spread = False  #: (``__init__`` sets it)

    def __init__(self, cubin: bytes, form: str = "plain", stages: int | None = None,
                 kwarps: int = 1, pdl: bool = False, carveout: int | None = None,
                 tiles16: int = 1, columns: str = COLUMNS, rows16_from: int = SET_ROWS + 1,
                 spread: bool | str = False) -> None:
        name = kernel_name(form, kwarps)
        check_columns(form, kwarps, columns, stages)
        if not 1 <= rows16_from <= SET_ROWS + 1:
            raise ValueError(f"the 16-row kernel takes from 1 to {SET_ROWS + 1} rows of x on, not {rows16_from}")
        if (form == "xring" or columns == NATURAL) and stages is None:
            raise ValueError(f"the {form} form{' (natural)' if columns == NATURAL else ''} sizes its shared "
                             "memory by the cubin's stages: pass stages")
        if carveout is not None and not 0 <= carveout <= 100:
            raise ValueError(f"the shared memory carveout is a percentage, 0 to 100, got {carveout}")
        if tiles16 == 2 and (stages is None or stages > T2_MAX_STAGES):
            raise ValueError(f"two tiles a warp are built in cubins of at most {T2_MAX_STAGES} stages; "
                             f"got stages {stages}")
        if spread not in SPREADS:
            raise ValueError(f"spread is one of {', '.join(map(repr, SPREADS))}, got {spread!r}")
        if tiles16 == 2 and kwarps == WIDE_WARPS:
            raise ValueError(f"two tiles a warp are not built with {WIDE_WARPS} warps a tile")
        name16 = kernel_name(form, kwarps, MAX_ROWS, tiles16) if form in KERNELS or form in WG_FORMS else None
        self.form, self.stages, self.kwarps, self.pdl, self.carveout, self.tiles16 = (
            form, stages, kwarps, pdl, carveout, tiles16)
        self.columns, self.rows16_from, self.spread = columns, rows16_from, spread
        self.warps = block_warps(kwarps, form)  #: warps a block (the cubin built with ``cubin_warps``)
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self._counters: torch.Tensor | None = None  #: split counters (``reserve_counters``)
        self._make_arguments()
        self._make_torch_context_current()
        #: (function, blocks, m) -> dynamic shared bytes of a spread launch (``spread_bytes``)
        self._spread_bytes: dict = {}
        if spread:
            self._device = {name: self._device_attribute(attribute) for name, attribute in (
                ("sms", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                ("per_sm", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
                ("per_block", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                ("reserved", CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK))}
        self.module = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), cubin), "cuModuleLoadData")
        self.function = self._function(name, SET_ROWS)
        #: the 9 .. 16-row kernel (None for a diagnostic: 8 rows at most)
        self.function16 = self._function(name16, MAX_ROWS) if name16 is not None else None
        self.dequant_functions = {form: self._lookup(name) for form, name in DEQUANTS.items()}

    def _make_arguments(self) -> None:
        """The launches' parameter blocks (``GEMV_PARAMS``, ``DEQUANT_PARAMS`` of mma_gemv.cu),
        set in place a launch, and the PDL launch configurations made so far."""
        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        gemv = [ptr] * 4 + [i32] * 8 + [ptr] * 4 + [i32] * 2
        #: the TMA forms take x's map past the GEMV's parameters
        self._gemv_args = KernelArguments(gemv + ([TensorMap] if self.form in WG_TMA_FORMS else []))
        self._x_maps: dict = {}  #: (x's address, M, K, rows a box) -> its TensorMap (``x_map``)
        self._dequant_args = KernelArguments([ptr, ptr] + [i32] * 6 + [ptr, ptr, i32])
        self._configs: dict = {}  #: (grid, dynamic shared bytes, stream) -> LaunchConfig

    def _lookup(self, name: str) -> ctypes.c_void_p:
        """The loaded module's function ``name``."""
        function = ctypes.c_void_p()
        self._check(self.cuda.cuModuleGetFunction(ctypes.byref(function), self.module, name.encode()),
                    "cuModuleGetFunction")
        return function

    def _function(self, name: str, rows: int) -> ctypes.c_void_p:
        """A GEMV function of x of up to ``rows`` rows, with this launcher's attributes set."""
        function = self._lookup(name)
        dynamic = self.dynamic_bytes(rows, rows)
        if self.spread:  # room for any spread launch's padding (the carveout the driver's choice:
            # preferring all of it to shared memory cost down's 16-row launch 15.1 -> 23.1 us on an
            # H100, its x read through a smaller L1)
            dynamic = self._device["per_block"] - self._static_bytes(function)
        if dynamic:  # past the 48 KiB a block gets without asking
            self._check(self.cuda.cuFuncSetAttribute(
                function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic), "cuFuncSetAttribute")
        if self.carveout is not None:
            self._check(self.cuda.cuFuncSetAttribute(
                function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, self.carveout),
                "cuFuncSetAttribute")
        return function

    def _device_attribute(self, attribute: int) -> int:
        value, device = ctypes.c_int(), ctypes.c_int()
        self._check(self.cuda.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()), "cuDeviceGet")
        self._check(self.cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device), "cuDeviceGetAttribute")
        return value.value

    def _static_bytes(self, function: ctypes.c_void_p) -> int:
        value = ctypes.c_int()
        self._check(self.cuda.cuFuncGetAttribute(ctypes.byref(value), CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                                 function), "cuFuncGetAttribute")
        return value.value

    def _resident_blocks(self, function: ctypes.c_void_p, dynamic: int) -> int:
        value = ctypes.c_int()
        self._check(self.cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(value), function, 32 * self.warps, ctypes.c_size_t(dynamic)),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return value.value

    def spread_bytes(self, function: ctypes.c_void_p, blocks: int, m: int, rows: int = SET_ROWS) -> int:
        """The dynamic shared memory of a spread launch of ``blocks`` blocks over ``m`` rows of x
        by the kernel of up to ``rows`` (``SET_ROWS`` or ``MAX_ROWS``): at least its own
        (``dynamic_bytes``), and as much as keeps a multiprocessor to
        ``ceil(blocks / multiprocessors)`` blocks (``spread_blocks_bytes``) where registers and the
        rings alone would let it hold more; worked out once a (function, blocks, m)."""
        key = (function.value, blocks, m)
        if key not in self._spread_bytes:
            d = self._device
            self._spread_bytes[key] = spread_blocks_bytes(
                -(-blocks // d["sms"]), self.dynamic_bytes(m, rows), self._static_bytes(function), d,
                lambda dynamic: self._resident_blocks(function, dynamic), least=self.spread == "least")
        return self._spread_bytes[key]

    def dynamic_bytes(self, m: int, rows: int = SET_ROWS) -> int:
        """Dynamic shared memory of a launch over ``m`` rows of x by the kernel of up to ``rows``
        (``SET_ROWS`` or ``MAX_ROWS``): the xring form's ring of x, the natural build's wgmma
        forms' every ring (``wg_shared_bytes``), else 0."""
        if self.form == "xring":
            return self.warps * self.stages * m * X_RING_BYTES
        if self.columns == NATURAL:
            return wg_shared_bytes(self.kwarps, self.stages, rows)
        return 0

    def _make_torch_context_current(self) -> None:
        """The driver API loads into this thread's current context: torch's primary context, made
        current here (``torch.cuda.is_available()`` creates none; a module load without one fails
        with error 201, CUDA_ERROR_INVALID_CONTEXT, as the H200 showed on 2026-12-02)."""
        torch.zeros(1, device="cuda")  # torch creates its primary context and makes it current
        context = ctypes.c_void_p()
        self._check(self.cuda.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
        if not context.value:
            device = ctypes.c_int()
            self._check(self.cuda.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()),
                        "cuDeviceGet")
            self._check(self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                        "cuDevicePrimaryCtxRetain")
            self._check(self.cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA driver error {code}")

    def reserve_counters(self, tiles: int, device: torch.device) -> None:
        """Room for ``tiles`` counters (zeros; each launch leaves them zero): a 16-row tile's
        split count each, and a gated launch's pair counts after them (N / 16 + N / 32). Call it
        outside a CUDA graph capture, for the largest weight a split or gated launch will see."""
        have = self._counters
        if have is None or have.numel() < tiles or have.device != torch.device(device):
            self._counters = torch.zeros(max(tiles, have.numel() if have is not None else 0),
                                         dtype=torch.int32, device=device)

    def __call__(self, words: torch.Tensor, scale_codes: torch.Tensor, x: torch.Tensor,
                 part: torch.Tensor | None, groups_per_split: int, *,
                 row_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 out: torch.Tensor | None = None, pair_tiles: int = 0,
                 gated: bool = False, early: bool = True) -> torch.Tensor:
        """One launch over ``ceil(K / 16 / groups_per_split)`` splits of K, from ``repack``'s
        words and scale codes and x (M, K) bf16 (contiguous, 16-byte aligned). Without ``out``:
        ``part`` (splits, M, N) float32 gets each split's sums; returns it. With ``out`` (M, N)
        bf16 and ``row_scale`` (N,) float32: out = sum * row_scale (+ ``bias`` (N,) bf16), the
        splits added in the kernel through ``part`` (a (splits, M, N) float32 workspace; None
        for one split) and the reserved counters; returns ``out``.

        ``pair_tiles`` (> 0): the words are a fused [gate | up] of that many 16-row tiles a half
        in ``mma_layout.pair_rows`` order (``row_scale`` too); out's columns are in [gate | up]
        order again. ``gated``: out is (M, N / 2) = silu(gate) * up as
        ``hinge.layers.fast_triton.silu_mul`` computes it from the two bf16 results; part is
        then needed for one split too, and the counters cover N / 16 + N / 32.

        ``early`` (a PDL build): launched so that it may start before the kernel before it ends
        (it waits for it after copying its first weights); False: launched after it ends."""
        n, k, m = words.shape[0] * 16, x.shape[1], x.shape[0]
        if groups_per_split % 8 or groups_per_split <= 0:
            raise ValueError(f"groups_per_split must be a positive multiple of 8 (a superstep), "
                             f"got {groups_per_split}")
        rows = MAX_ROWS if m >= self.rows16_from and self.function16 is not None else SET_ROWS
        if not (x.is_contiguous() and x.dtype == torch.bfloat16 and x.data_ptr() % 16 == 0
                and 1 <= m <= rows and k == words.shape[1] * SUPERSTEP):
            raise ValueError(f"x must be a contiguous 16-byte aligned ({rows} rows at most, "
                             f"{words.shape[1] * SUPERSTEP} columns) bf16 tensor, got "
                             f"{tuple(x.shape)} {x.dtype}")
        if (pair_tiles or gated) and (out is None or pair_tiles * 32 != n or bias is not None):
            raise ValueError(f"a paired [gate | up] launch takes out, no bias and pair_tiles = N / 32 "
                             f"= {n // 32}; got pair_tiles {pair_tiles}, "
                             f"{'a bias' if bias is not None else 'no bias'}, "
                             f"{'no out' if out is None else 'out'}")
        splits = -(-(k // 16) // groups_per_split)
        width = n // 2 if gated else n
        counters = n // 16 + (n // 32 if gated else 0)
        if out is not None:
            if row_scale is None or out.dtype != torch.bfloat16 or out.shape != (m, width):
                raise ValueError(f"the fused epilogue takes row_scale and a ({m}, {width}) bf16 out; got "
                                 f"{None if row_scale is None else 'row_scale'}, {tuple(out.shape)} {out.dtype}")
            if (splits > 1 or gated) and (self._counters is None or self._counters.numel() < counters):
                raise ValueError(f"{splits} splits{' gated' if gated else ''} need {counters} counters: "
                                 "call reserve_counters first (outside a graph capture)")
        if (out is None or splits > 1 or gated) and (part is None or part.dtype != torch.float32
                                                     or part.shape != (splits, m, n)):
            raise ValueError(f"part must be a ({splits}, {m}, {n}) float32 tensor for {splits} splits")

        pointers = self._gemv_args.set(
            _address(words), _address(scale_codes), _address(x), _address(part), n, k, m,
            *block_strides(words, scale_codes), groups_per_split, _address(row_scale), _address(bias),
            _address(out), _address(self._counters), pair_tiles, int(gated))
        if self.form in WG_TMA_FORMS:
            self._gemv_args.set_map(self.x_map(x.data_ptr(), m, k, rows))
        tiles = self.tiles16 if rows > SET_ROWS else 1  # a warp's
        grid = (-(-(n // 16) // (tiles * self.warps // self.kwarps)), splits, 1)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        function = self.function16 if rows > SET_ROWS else self.function
        shared = (self.spread_bytes(function, grid[0] * grid[1], m, rows) if self.spread
                  else self.dynamic_bytes(m, rows))
        if self.pdl and early:
            key = (grid, shared, stream.value)
            if key not in self._configs:  # a few (grid, stream) a launcher: built once each
                self._configs[key] = launch_config(grid, (32 * self.warps, 1, 1), shared, stream)
            self._check(self.cuda.cuLaunchKernelEx(ctypes.byref(self._configs[key]), function, pointers, None),
                        "cuLaunchKernelEx")
        else:
            self._check(self.cuda.cuLaunchKernel(function, *grid, 32 * self.warps, 1, 1,
                                                 shared, stream, pointers, None),
                        "cuLaunchKernel")
        return part if out is None else out

    def x_map(self, x_address: int, m: int, k: int, rows: int) -> TensorMap:
        """The TMA forms' tensor map of x (``x_map_arguments``), encoded by the driver once an
        (address, M, K, rows) and kept (a CUDA graph's launches are captured with theirs; the
        last 64 kept)."""
        key = (x_address, m, k, rows)
        if key not in self._x_maps:
            if len(self._x_maps) >= 64:
                self._x_maps.clear()
            tensor_map = TensorMap()
            self._check(self.cuda.cuTensorMapEncodeTiled(ctypes.byref(tensor_map), *x_map_arguments(*key)),
                        "cuTensorMapEncodeTiled")
            self._x_maps[key] = tensor_map
        return self._x_maps[key]

    def dequantize(self, words: torch.Tensor, scale_codes: torch.Tensor, row_scale: torch.Tensor,
                   out: torch.Tensor, pair_tiles: int = 0, form: str | None = None) -> torch.Tensor:
        """``out`` (N, K) bf16, contiguous = the weight ``bf16(e2m1 * scale * row_scale)`` from
        ``repack``'s words and scale codes (any memory order), ``row_scale`` (N,) float32 in the
        words' row order; rows in W's order (``pair_tiles`` > 0: the words are a paired [gate |
        up], out is [gate | up]). Bits equal to ``triton_gemm.dequantize_weight``'s of the
        checkpoint's codes. Launched in order on torch's stream (a CUDA graph captures it).
        ``form``: of ``DEQUANTS`` (default ``DEQUANT_FORM``)."""
        n, k = words.shape[0] * 16, words.shape[1] * SUPERSTEP
        form = form or DEQUANT_FORM
        if form not in DEQUANTS:
            raise ValueError(f"no form {form!r} of the dequantizing kernel; the forms are {', '.join(DEQUANTS)}")
        if out.shape != (n, k) or out.dtype != torch.bfloat16 or not out.is_contiguous() or out.data_ptr() % 16:
            raise ValueError(f"dequantize writes a contiguous 16-byte aligned ({n}, {k}) bf16 tensor, got "
                             f"{tuple(out.shape)} {out.dtype}")
        if row_scale.shape != (n,) or row_scale.dtype != torch.float32 or not row_scale.is_contiguous():
            raise ValueError(f"dequantize takes a contiguous ({n},) float32 row_scale, got "
                             f"{tuple(row_scale.shape)} {row_scale.dtype}")
        if pair_tiles and pair_tiles * 32 != n:
            raise ValueError(f"a paired [gate | up] weight of {n} rows has {n // 32} tiles a half, not {pair_tiles}")
        pointers = self._dequant_args.set(_address(words), _address(scale_codes), n, k,
                                          *block_strides(words, scale_codes), _address(row_scale),
                                          _address(out), pair_tiles)
        per_warp = DQ_BLOCKS if form == "staged" else 1  # (tile, superstep) blocks
        blocks = -(-(n // 16 * (k // SUPERSTEP)) // (self.warps * per_warp))
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self.cuda.cuLaunchKernel(self.dequant_functions[form], blocks, 1, 1, 32 * self.warps, 1, 1, 0,
                                             stream, pointers, None), "cuLaunchKernel")
        return out


def spread_blocks_bytes(cap: int, need: int, static: int, device: dict, resident, least: bool = False) -> int:
    """Dynamic shared bytes (at least ``need``) a block of ``static`` bytes of its own asks for
    so that a multiprocessor holds at most ``cap`` of them: ``need`` where ``resident(need)``
    (the driver's occupancy of a launch asking that much) is within ``cap`` already, else the
    most that leaves room for ``cap`` (``device``: ``per_sm``, ``per_block`` and ``reserved``
    shared bytes), stepped down a KiB while the driver finds room for fewer. ``least``: the
    fewest KiB past ``need`` that keep it to ``cap`` (the cap's blocks then fill the least of
    the multiprocessor's shared memory, leaving the most to L1, which caches x)."""
    if resident(need) <= cap:
        return need
    most = device["per_block"] - static
    if least:  # resident() falls as the bytes grow: the first KiB step where it is within cap
        low, high = 0, -(-(most - need) // 1024)  # KiB past need: low too few, high enough
        if resident(need + high * 1024) > cap:
            return most  # (no padding holds it: the most there is)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if resident(need + mid * 1024) > cap else (low, mid)
        return min(need + high * 1024, most)
    dynamic = min(most, device["per_sm"] // cap - device["reserved"] - static)
    while dynamic > need and resident(dynamic) < cap:
        dynamic -= 1024
    return max(dynamic, need)


def _address(t: torch.Tensor | None) -> int:
    return t.data_ptr() if t is not None else 0


class KernelArguments:
    """A kernel's parameters as ``cuLaunchKernel`` takes them (an array of pointers to their
    values), built once: a launch sets the values in place (building the ctypes objects each
    launch cost ~20 us of host time, most of an eager launch's)."""

    def __init__(self, types: list) -> None:
        self.values = [kind() for kind in types]
        self.pointers = (ctypes.c_void_p * len(types))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in self.values])
        #: the scalar and pointer parameters ``set`` takes; a ``TensorMap`` one is ``set_map``'s
        self._scalars = [v for v in self.values if not isinstance(v, TensorMap)]
        self._map = next((v for v in self.values if isinstance(v, TensorMap)), None)

    def set(self, *values: int) -> ctypes.Array:
        """The pointer array, the scalar and pointer parameters set to ``values`` (in the
        kernel's order, a ``TensorMap`` parameter left to ``set_map``)."""
        if len(values) != len(self._scalars):
            raise ValueError(f"the kernel takes {len(self._scalars)} parameters, got {len(values)}")
        for slot, value in zip(self._scalars, values, strict=True):
            slot.value = value
        return self.pointers

    def set_map(self, tensor_map: TensorMap) -> None:
        """The kernel's ``TensorMap`` parameter set to a copy of ``tensor_map``."""
        if self._map is None:
            raise ValueError("the kernel takes no tensor map parameter")
        ctypes.memmove(ctypes.addressof(self._map), ctypes.addressof(tensor_map), ctypes.sizeof(TensorMap))


class TensorMap(ctypes.Structure):
    """cuda.h's ``CUtensorMap``: 128 opaque bytes (mma_gemv.cu's ``TensorMap`` parameter)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


#: cuda.h's values for ``cuTensorMapEncodeTiled``: bf16 elements, no interleave, the 128-byte
#: swizzle, L2 promotion of 128 bytes, out-of-bounds elements zeros
CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
CU_TENSOR_MAP_SWIZZLE_128B = 3
CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2
X_MAP_COLUMNS = 64  #: columns of x a TMA box (128 bytes: the swizzle's row)


def x_map_arguments(x_address: int, m: int, k: int, rows: int) -> tuple:
    """``cuTensorMapEncodeTiled``'s arguments past the map for x (M, K) bf16 at ``x_address``, as
    the TMA forms read it (mma_gemv.cu's ``tma_x_stage``): rank 2, dims (K, M), row stride 2K
    bytes, boxes of ``X_MAP_COLUMNS`` columns by ``rows`` rows (8 a set of MMA columns), the
    128-byte swizzle that the kernels' descriptors name, rows past M zeros."""
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    return (CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ctypes.c_void_p(x_address), (u64 * 2)(k, m), (u64 * 1)(2 * k),
            (u32 * 2)(X_MAP_COLUMNS, rows), (u32 * 2)(1, 1), 0, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, 0)


CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  #: cuda.h's CUlaunchAttributeID


class LaunchAttribute(ctypes.Structure):
    """cuda.h's ``CUlaunchAttribute``: an id, padding to 8 bytes, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):
    """cuda.h's ``CUlaunchConfig``."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


def launch_config(grid: tuple, block: tuple, shared: int, stream: ctypes.c_void_p) -> LaunchConfig:
    """A ``cuLaunchKernelEx`` configuration whose launch may start before the kernel before it
    in the stream ends (programmatic stream serialization: the kernel waits for it with
    ``griddepcontrol.wait``; ``hinge.devices.early_dependents``)."""
    attribute = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value[0] = 1  # programmaticStreamSerializationAllowed
    config = LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared, stream,
                          ctypes.pointer(attribute), 1)
    config._attribute = attribute  # kept alive with the configuration
    return config
