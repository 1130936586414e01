"""How a launch of the tensor-core GEMV (``mma_gemv``) is cut for an N x K weight: K splits,
warps a tile, ring depth, and optionally the weights' memory order and column map, the kernel's
form and its copies' L2 prefetch (``Tiling``). A tuned JSON file by shape (``$HINGE_NVFP4_MMA_PLAN``, else the
one shipped for the GPU model under ``tuned/``, as ``tools/gpu/nvfp4_mma_probe.py --plan-json``
writes them) wins; other shapes take the built-in rule (``tiling``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

from hinge_nvfp4.mma_gemv import (
    KERNELS,
    KWARPS,
    MAX_STAGES,
    ONE_SET,
    PREFETCHES,
    ROW_SCALE_READS,
    SET_ROWS,
    SPREADS,
    T2_FORMS,
    T2_MAX_STAGES,
    TRIGGERS,
    WARPS,
    WG_FORMS,
    WG_KWARPS,
    WIDE_MAX_STAGES,
    WIDE_WARPS,
    check_columns,
    kwarps_built,
    ring_built,
    two_tiles_built,
)
from hinge_nvfp4.mma_layout import COLUMNS, LAYOUTS, REPACK_MAPS, SUPERSTEP


def groups_per_split(groups: int, splits: int) -> int:
    """Groups a split when ``groups`` are cut in ``splits``: whole supersteps (8 groups), the
    last split the shorter (``ceil(groups / result)`` splits may be fewer than asked)."""
    per_split = -(-groups // splits)
    return -(-per_split // 8) * 8


class Rows16(NamedTuple):
    """A tuned launch of ``from_rows`` (default 9) .. 16 rows of x over the same repack, splits
    and ring: ``kwarps`` warps a tile, the kernel's ``form``, ``tiles`` 16-row tiles a warp
    (``mma_gemv.MmaGemv`` tiles16, rows16_from)."""

    kwarps: int
    form: str
    tiles: int
    from_rows: int = SET_ROWS + 1


class Tiling(NamedTuple):
    """How one weight's launch is cut: ``splits`` of K of ``groups_per_split`` groups (added in
    the kernel), ``kwarps`` warps a tile, a ring ``stages`` supersteps deep; a tuned tiling may
    also name the weight's memory order (``mma_layout.in_order``), the kernel's form
    (``KERNELS``) and its copies' L2 prefetch (``PREFETCHES``), else the kernel's own (None),
    its launches of 9 .. 16 rows (``rows16``, else those of the launch of fewer), the
    repack's column map (``columns``: ``mma_layout.COLUMN_MAPS``, else the kernel's) and whether
    its launches spread their blocks evenly over the multiprocessors (``spread``: True, or
    ``"least"`` padded the least, ``mma_gemv.MmaGemv`` spread; else the kernel's), when they let the kernel after them launch
    (``trigger``: ``mma_gemv.TRIGGERS``, else the kernel's) and when they read their epilogue's
    row_scale (``row_scale``: ``mma_gemv.ROW_SCALE_READS``, PDL builds only; else at the end)
    and the launch of its fewest rows (``few``: ``Few``, else the tiling's own)."""

    splits: int
    groups_per_split: int
    kwarps: int
    stages: int
    layout: str | None = None
    form: str | None = None
    prefetch: int | None = None
    rows16: Rows16 | None = None
    columns: str | None = None
    spread: bool | str | None = None
    trigger: str | None = None
    row_scale: str | None = None
    few: Few | None = None


class Few(NamedTuple):
    """A tuned launch of 1 .. ``upto`` rows of x over the same repack (memory order, column map,
    splits): a ``Tiling`` (``plan``) whose form, warps a tile, ring, prefetch, spread, trigger
    and row_scale read may differ from the tiling's (H100, 2026-12-07: the xring form, its x in
    a ring beside the weights', was the fastest at one row on qkv and down and among the slowest
    at eight; docs/nvfp4.md "One row in its own form")."""

    upto: int
    plan: Tiling


#: what a launch of the fewest rows cannot change: the repack it reads, and what is not a launch's
REPACK_KEYS = ("splits", "layout", "columns", "r16", "few")

STAGES = 4  #: the built-in plan's ring depth (4 was as fast as 8 or faster everywhere timed)
MIN_WARPS_PER_SM = 7.5  #: the built-in plan's least warps a launch, a multiprocessor
MAX_WARPS_PER_SM = 16  #: ... and most, splitting long runs
LONG_RUN = 16  #: supersteps of a warp's run past which the built-in plan splits K
MIN_RUN = 4  #: ... and the fewest it leaves a warp
SHARED_BYTES = 232448  #: shared memory a Hopper multiprocessor gives its blocks (227 KiB)


def resident_warps(stages: int, rows: int = 8) -> int:
    """Warps of the kernel a multiprocessor holds at once: registers for ``BLOCKS_PER_SM`` = 6
    blocks (mma_gemv.cu caps them at 80 a thread; its 16-row kernels, ``rows`` > 8, at 128 for
    4), shared memory for as many blocks as the rings (1152 bytes a stage a warp; the warps of a
    tile add their sums in them) and the 1 KiB reserved a block leave room."""
    block = WARPS * stages * 1152 + 1024
    return WARPS * min(6 if rows <= 8 else 4, SHARED_BYTES // block)


def tiling(n: int, k: int, num_sms: int, tuned: dict | None = None) -> Tiling:
    """The launch of an N x K weight: ``tuned[f"{n}x{k}"]`` (``{"splits": .., "kwarps": ..,
    "stages": ..}``, optionally ``"layout"``, ``"form"``, ``"prefetch"``, ``"columns"``, ``"spread"``, ``"trigger"``,
    ``"row_scale"``, ``"r16"`` (``rows16_of``) and ``"few"`` (``few_of``); as
    ``tools/gpu/nvfp4_mma_probe.py --plan-json`` writes the fastest it timed, ``"few"`` from
    ``tools/gpu/nvfp4_launch_chain.py --sweep``)
    where given; else warps a tile doubled, then K split in two, until the launch has
    ``MIN_WARPS_PER_SM`` warps a multiprocessor, then splits doubled while a warp's run is longer
    than ``LONG_RUN`` supersteps and the launch stays within ``MAX_WARPS_PER_SM``, never leaving a
    warp fewer than ``MIN_RUN`` supersteps; a ring of ``STAGES``. Fewer warps were faster than
    more past that (H200, 2026-12-02, tenth session, docs/nvfp4.md: gate_up 21.7 us with its 1536
    tiles of one warp, 23.0 with 4 warps a tile, 44.3 with 4 splits of 4), and warps a tile
    faster than splits for the same count (qkv 8.6 us with 4 warps a tile, 9.8 with 4 splits)."""
    groups = k // 16
    entry = (tuned or {}).get(f"{n}x{k}")
    if entry is not None:
        splits, kwarps, stages = int(entry["splits"]), int(entry["kwarps"]), int(entry["stages"])
        layout, form, prefetch = entry.get("layout"), entry.get("form"), entry.get("prefetch")
        columns, spread, trigger = entry.get("columns"), entry.get("spread"), entry.get("trigger")
        row_scale = entry.get("row_scale")
        if (not kwarps_built(kwarps, stages) or not ring_built(stages) or not 1 <= splits <= groups // 8
                or layout not in (None, *LAYOUTS) or form not in (None, *KERNELS, *ONE_SET, *WG_FORMS)
                or (form in ONE_SET and kwarps not in KWARPS) or (form in WG_FORMS and kwarps not in WG_KWARPS)
                or prefetch not in (None, *PREFETCHES) or columns not in (None, *REPACK_MAPS)
                or spread not in (None, *SPREADS) or trigger not in (None, *TRIGGERS)
                or row_scale not in (None, *ROW_SCALE_READS)):
            raise ValueError(f"the tuned MMA GEMV tiling of {n}x{k} {entry} is not one the kernel "
                             f"runs: kwarps of {KWARPS} (or {WIDE_WARPS} with rings of <= {WIDE_MAX_STAGES}), "
                             f"stages 2 to {MAX_STAGES}, 1 to {groups // 8} "
                             f"splits, layouts {', '.join(LAYOUTS)}, forms {', '.join((*KERNELS, *ONE_SET))} "
                             f"(or {', '.join(WG_FORMS)} at {', '.join(map(str, WG_KWARPS))} warps a tile), "
                             f"prefetch of {PREFETCHES}, column maps {', '.join(REPACK_MAPS)}, spread "
                             f"true, false or \"least\", trigger {' or '.join(TRIGGERS)}, row_scale {' or '.join(ROW_SCALE_READS)} "
                             "(re-run nvfp4_mma_probe.py --plan-json, or drop the entry)")
        columns_of(entry, n, k, form, kwarps, stages)
        if form in ONE_SET and "r16" not in entry:
            raise ValueError(f"the tuned MMA GEMV tiling of {n}x{k} {entry} takes the {form} form, built "
                             f"for up to {SET_ROWS} rows of x alone: give it an \"r16\" entry naming "
                             f"the launch of 9 .. 16 rows (a form of {', '.join(KERNELS)})")
        per_split = groups_per_split(groups, splits)
        rows16 = rows16_of(entry.get("r16"), n, k, stages, columns)
        return Tiling(-(-groups // per_split), per_split, kwarps, stages, layout, form, prefetch, rows16,
                      columns, spread, trigger, row_scale, few_of(entry, n, k, num_sms, rows16))
    tiles, supers = n // 16, k // SUPERSTEP
    kwarps, splits = 1, 1
    fewest, most = MIN_WARPS_PER_SM * num_sms, MAX_WARPS_PER_SM * num_sms
    halves = lambda: supers // (2 * kwarps * splits) >= MIN_RUN  # noqa: E731 - runs halved stay long enough
    while tiles * kwarps * splits < fewest and halves():
        if kwarps < max(KWARPS):
            kwarps *= 2
        else:
            splits *= 2
    while supers / (kwarps * splits) > LONG_RUN and tiles * kwarps * splits * 2 <= most and halves():
        splits *= 2
    per_split = groups_per_split(groups, splits)
    return Tiling(-(-groups // per_split), per_split, kwarps, STAGES)


def columns_of(entry: dict, n: int, k: int, form: str | None, kwarps: int, stages: int) -> None:
    """Refuses a tuned entry (or its ``"r16"``) whose ``form`` at ``kwarps`` warps a tile cannot
    read its ``"columns"`` (``mma_gemv.check_columns``; no columns: the kernel's own, never
    natural; no form: the kernel's, a ``KERNELS`` form)."""
    try:
        check_columns(form or "plain", kwarps, entry.get("columns") or COLUMNS, stages)
    except ValueError as err:
        raise ValueError(f"the tuned MMA GEMV tiling of {n}x{k} {entry}: {err} (re-run "
                         "nvfp4_mma_probe.py --plan-json, or drop the entry)") from None


def rows16_of(entry: dict | None, n: int, k: int, stages: int, columns: str | None = None) -> Rows16 | None:
    """A tuned file's ``"r16": {"kwarps": .., "form": .., "tiles": .., "from": ..}`` of the N x K
    weight whose ring is ``stages`` deep and whose repack is in ``columns``, checked against
    what the kernel builds (``from``: the fewest rows it takes, default 9)."""
    if entry is None:
        return None
    kwarps, form, tiles = int(entry["kwarps"]), entry["form"], int(entry.get("tiles", 1))
    from_rows = int(entry.get("from", SET_ROWS + 1))
    wg = form in WG_FORMS  # (one tile a warp, a warp a warpgroup: mma_gemv.WG_FORMS)
    if (not kwarps_built(kwarps, stages) or (form not in KERNELS and not wg) or tiles not in (1, 2)
            or (wg and (kwarps not in WG_KWARPS or tiles != 1))
            or (tiles == 2 and not two_tiles_built(form, stages, kwarps)) or not 1 <= from_rows <= SET_ROWS + 1):
        raise ValueError(f"the tuned 16-row MMA GEMV launch of {n}x{k} {entry} is not one the kernel "
                         f"runs: kwarps of {KWARPS} (or {WIDE_WARPS} with rings of <= {WIDE_MAX_STAGES}), "
                         f"forms {', '.join(KERNELS)} (or {', '.join(WG_FORMS)} at one tile a warp), "
                         f"1 or 2 tiles a warp "
                         f"(2 in the {' and '.join(T2_FORMS)} forms with rings of <= {T2_MAX_STAGES} "
                         f"stages, up to {max(KWARPS)} warps a tile), from 1 to {SET_ROWS + 1} rows on "
                         "(re-run nvfp4_mma_probe.py --plan-json, or drop the entry)")
    columns_of({"columns": columns, "r16": entry}, n, k, form, kwarps, stages)
    return Rows16(kwarps, form, tiles, from_rows)


def few_of(entry: dict, n: int, k: int, num_sms: int, rows16: Rows16 | None) -> Few | None:
    """The tuned ``entry``'s ``"few": {"upto": .., "form": .., "kwarps": .., "stages": .., ...}``
    of the N x K weight whose 16-row launch is ``rows16``: up to ``upto`` rows (default 1, fewer
    than the 16-row launch takes) launched as the entry with the keys given changed, checked as
    ``tiling`` checks an entry; the keys of ``REPACK_KEYS`` are the entry's alone."""
    few = entry.get("few")
    if few is None:
        return None
    upto, below = int(few.get("upto", 1)), (rows16.from_rows if rows16 else SET_ROWS + 1) - 1
    fixed = [key for key in few if key in REPACK_KEYS]
    why = None
    if fixed:
        why = f"it names {', '.join(fixed)}, which are the entry's alone (the repack it reads)"
    elif not 1 <= upto <= below:
        why = f"up to {upto} rows, not 1 .. {below} (fewer than the 16-row launch takes)"
    else:
        launch = {key: value for key, value in entry.items() if key != "few"}
        launch.update((key, value) for key, value in few.items() if key != "upto")
        try:
            plan = tiling(n, k, num_sms, {f"{n}x{k}": launch})
        except ValueError as err:
            why = str(err)
    if why is not None:
        raise ValueError(f"the tuned MMA GEMV launch of the fewest rows of {n}x{k} {few} is not one the "
                         f"kernel runs: {why} (re-run nvfp4_launch_chain.py --sweep, or drop the entry)")
    return Few(upto, plan)


TUNED_DIR = Path(__file__).with_name("tuned")  #: shipped tilings, a JSON file a GPU model


def tuned_file(device_name: str) -> Path:
    """The shipped tilings of a GPU model: ``tuned/<name, spaces as _>.json``."""
    return TUNED_DIR / f"{device_name.replace(' ', '_')}.json"


def tuned_tilings(path: str | os.PathLike | None = None, device_name: str | None = None) -> dict:
    """The tuned tilings of ``path`` (default ``$HINGE_NVFP4_MMA_PLAN``), else those shipped for
    ``device_name`` (``tuned_file``), else none."""
    path = path or os.environ.get("HINGE_NVFP4_MMA_PLAN")
    if not path:
        shipped = tuned_file(device_name) if device_name else None
        return json.loads(shipped.read_text()) if shipped is not None and shipped.exists() else {}
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"HINGE_NVFP4_MMA_PLAN={path}: not a readable JSON file of tilings "
                         f"({err}); unset it to use the built-in plan") from err
