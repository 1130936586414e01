"""Merge attention computed over parts of a query's keys (a split decode's tail and chunks) into
the attention over all of them, by log-sum-exp, in a fixed order.

Each part ``s`` of a query row gives ``o_s`` (attention over that part's keys, normalised within
the part) and ``lse_s = log sum_j exp(score_j)`` over those keys. The whole is
``sum_s w_s o_s / sum_s w_s`` with ``w_s = exp(lse_s - max_s lse_s)``.

Layout (``hinge_fa4.split``): row ``t`` owns virtual rows ``t S + s`` for slots ``s < S``; its
first ``num_parts[t]`` slots are its parts (the tail, then chunks by position), the rest are
never read. Order: the max first (exact in any order), then the weighted sums in a fixed order
of the row's parts alone, per (row, head): a row's bits depend on its own parts only, never on
the batch or on ``S`` (batch invariance of the merge). The Triton kernel sums blocks of 16 parts
(a fixed tree within a block, blocks in slot order), the torch one part after another: the same
merge, not the same bits.

``merge_parts`` runs the Triton kernel (``hinge_fa4.merge_triton``, one launch) on CUDA, and
``merge_parts_torch`` (the same merge in torch, float64 for float64 inputs) elsewhere.
"""

from __future__ import annotations

import torch


def merge_parts(out_parts: torch.Tensor, lse_parts: torch.Tensor, num_parts: torch.Tensor,
                num_slots: int, out_dtype: torch.dtype) -> torch.Tensor:
    """Merge per-part attention into the whole.

    :param out_parts: (T S, H, D) per-part outputs (any float dtype; any row stride).
    :param lse_parts: (T S, H) natural-log sum-exp of each part's scores (any strides).
    :param num_parts: (T,) int32 parts of each row (>= 1; a row whose parts all have lse -inf
        gives zeros); on CUDA written before the call that made the parts started (the early
        launched merge reads it before waiting for that call).
    :returns: (T, H, D) in ``out_dtype``.
    """
    if out_parts.is_cuda:
        from hinge_fa4.merge_triton import merge_parts_triton

        return merge_parts_triton(out_parts, lse_parts, num_parts, num_slots, out_dtype)
    return merge_parts_torch(out_parts, lse_parts, num_parts, num_slots).to(out_dtype)


def merge_parts_torch(out_parts: torch.Tensor, lse_parts: torch.Tensor, num_parts: torch.Tensor,
                      num_slots: int) -> torch.Tensor:
    """``merge_parts`` in torch: (T, H, D) float64 for float64 ``lse_parts``, else float32."""
    acc_dtype = torch.float64 if lse_parts.dtype == torch.float64 else torch.float32
    v, h, d = out_parts.shape
    t = v // num_slots
    out = out_parts.reshape(t, num_slots, h, d).to(acc_dtype)
    lse = lse_parts.reshape(t, num_slots, h).to(acc_dtype)
    used = torch.arange(num_slots, device=lse.device)[None, :] < num_parts[:, None].to(lse.device)
    lse = lse.masked_fill(~used[..., None], float("-inf"))
    top = lse.amax(dim=1)  # (T, H)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    acc = torch.zeros(t, h, d, dtype=acc_dtype, device=out.device)
    total = torch.zeros(t, h, dtype=acc_dtype, device=out.device)
    for s in range(num_slots):
        w = torch.exp(lse[:, s] - top)  # 0 for an unused slot
        live = (w > 0)[..., None]
        acc = acc + torch.where(live, w[..., None] * out[:, s], torch.zeros_like(acc))
        total = total + w
    return acc / torch.where(total > 0, total, torch.ones_like(total))[..., None]
