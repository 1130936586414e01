"""Host side of the paged-attention kernels: the one tile configuration per layer shape, and
the launches (fold, or split + combine). Nothing here reads a device value (graph safe)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import ModuleType

import torch

ROWS_PER_TILE = 64  #: query rows (tokens x heads of one KV group) per tile
#: lanes of the in-kernel request scan: one compiled variant for every batch below 64 requests
MIN_REQUEST_LANES = 64
#: the split partials hold a multiple of this many splits per row (their strides, and so the
#: compiled variant, stay the same whatever the step's longest request)
SPLITS_ALIGN = 8
LOG2E = 1.4426950408889634


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class TileConfig:
    """Everything that shapes a row's arithmetic; fixed per (heads, KV heads, head dim), never by
    the batch, so a row's bits do not depend on the step it runs in."""

    group: int  #: query heads per KV head
    g_p2: int  #: ``group`` rounded up to a power of two (rows per token in a tile)
    tpt: int  #: tokens per tile
    head_dim: int
    d_p2: int
    block_n: int  #: keys per block (absolute positions)
    num_warps: int
    num_stages: int

    @property
    def block_m(self) -> int:
        return self.tpt * self.g_p2

    def max_tiles(self, num_tokens: int, num_requests: int) -> int:
        """Upper bound on the q tiles of ``num_requests`` requests holding ``num_tokens`` rows."""
        return (num_tokens + num_requests * (self.tpt - 1)) // self.tpt


@functools.cache
def tile_config(num_heads: int, num_kv_heads: int, head_dim: int) -> TileConfig:
    if num_heads % num_kv_heads:
        raise ValueError(f"triton attention: {num_heads} query heads do not split into "
                         f"{num_kv_heads} KV heads (GQA needs a whole number per KV head)")
    group = num_heads // num_kv_heads
    g_p2 = next_pow2(group)
    d_p2 = max(16, next_pow2(head_dim))
    wide = d_p2 > 128
    return TileConfig(group=group, g_p2=g_p2, tpt=max(1, ROWS_PER_TILE // g_p2), head_dim=head_dim,
                      d_p2=d_p2, block_n=32 if wide else 64, num_warps=8 if wide else 4,
                      num_stages=2)


def paged_attention(
    kernels: ModuleType,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    cu_q: torch.Tensor,
    kv_lens: torch.Tensor,
    *,
    num_requests: int,
    num_kv_heads: int,
    scale: float,
    window: int | None,
    page_size: int,
    split_size: int,
    fold: bool,
    max_splits: int,
    target_programs: int,
    upcast: bool,
) -> torch.Tensor:
    """(T, H, D) attention of ``q`` (T, H, D) over the paged cache; see ``paged_attention.py``.

    :param cu_q: (num_requests + 1,) int32 row offsets; :param kv_lens: (num_requests,) int32.
    :param fold: one kernel folding splits in registers; else split partials + combine.
    :param max_splits: splits a row may need (partial buffer size, split mode only).
    :param target_programs: programs the split mode aims to launch in all (its parallelism).
    :param upcast: run the dots in float32 (float32 models, and the CPU interpreter, whose dot
        cannot multiply bfloat16).
    """
    t, h, d = q.shape
    cfg = tile_config(h, num_kv_heads, d)
    if cfg.block_n > split_size or split_size % cfg.block_n:
        raise ValueError(f"triton attention: split_size {split_size} must be a multiple of {cfg.block_n}")
    if q.stride(2) != 1:
        q = q.contiguous()
    assert k_cache.stride(2) == 1 and v_cache.stride(2) == 1, "the KV pool's head_dim must be contiguous"
    assert page_table.stride(1) == 1, "page_table rows must be contiguous"
    out = torch.empty(t, h, d, dtype=q.dtype, device=q.device)
    tiles = cfg.max_tiles(t, num_requests)
    if t == 0 or tiles == 0:
        return out
    r_p2 = max(MIN_REQUEST_LANES, next_pow2(num_requests + 1))
    prec = "ieee" if upcast or q.dtype == torch.float32 else "tf32"
    qk_scale = scale * LOG2E
    win = 0 if window is None else int(window)
    launch = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages, enable_fp_fusion=False)
    shape = dict(GROUP=cfg.group, G_P2=cfg.g_p2, TPT=cfg.tpt, HEAD_DIM=d, D_P2=cfg.d_p2,
                 SPLIT=split_size, R_P2=r_p2, HAS_WINDOW=window is not None)
    if fold:
        part_o = part_ml = out  # unused
        po_strides = pm_strides = (0, 0, 0)
        programs = 1
    else:
        splits = -(-max(1, max_splits) // SPLITS_ALIGN) * SPLITS_ALIGN
        part_o = torch.empty(t, h, splits, d, dtype=torch.float32, device=q.device)
        part_ml = torch.empty(t, h, splits, 2, dtype=torch.float32, device=q.device)
        po_strides, pm_strides = part_o.stride()[:3], part_ml.stride()[:3]
        programs = split_programs_for(tiles, num_kv_heads, max(1, max_splits), target_programs)
    kernels.attention_kernel[(tiles, num_kv_heads, programs)](
        q, k_cache, v_cache, out, part_o, part_ml, cu_q, kv_lens, page_table,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0),
        v_cache.stride(1), out.stride(0), out.stride(1), page_table.stride(0),
        *po_strides, *pm_strides, num_requests, t, programs, qk_scale, win,
        PAGE_SIZE=page_size, BLOCK_N=cfg.block_n, FOLD=fold, UPCAST=upcast, PREC=prec,
        **shape, **launch,
    )
    if not fold:
        kernels.combine_kernel[(tiles, num_kv_heads)](
            out, part_o, part_ml, cu_q, kv_lens, out.stride(0), out.stride(1), *po_strides,
            *pm_strides, num_requests, t, win, **shape, **launch,
        )
    return out


def split_programs_for(tiles: int, num_kv_heads: int, max_splits: int, target_programs: int) -> int:
    """Programs per (tile, KV head) in split mode: enough to give ``target_programs`` in all,
    never more than the splits a row may have."""
    return max(1, min(max_splits, math.ceil(target_programs / max(1, tiles * num_kv_heads))))
