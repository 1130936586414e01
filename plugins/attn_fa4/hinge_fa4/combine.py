"""Merge attention computed over parts of a request's keys (a split decode's chunks and tail)
into the attention over all of them, by log-sum-exp, in a fixed order.

Each part ``s`` of a query row gives ``o_s`` (attention over that part's keys, normalised within
the part) and ``lse_s = log sum_j exp(score_j)`` over those keys (-inf for a part with no keys).
The whole is ``sum_s w_s o_s / sum_s w_s`` with ``w_s = exp(lse_s - max lse)``, and its lse is
``max lse + log sum_s w_s``.

Order: parts sit in a fixed layout (the tail first, then chunks in ascending position, empty
parts after them), and the sums are a halving tree over the part axis padded with zeros to a
power of two. An empty part weighs exactly 0 and ``x + 0 == x``, so a row's bits do not depend on
how many parts other rows of the batch have (batch invariance of the merge), and every op is
element-wise per row (no reduction whose order depends on the tensor's shape).
"""

from __future__ import annotations

import torch


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim`` as a halving tree: pad to a power of two with zeros, then repeatedly
    add the second half onto the first. The association is fixed by the index alone."""
    n = x.shape[dim]
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        pad_shape = list(x.shape)
        pad_shape[dim] = size - n
        x = torch.cat([x, x.new_zeros(pad_shape)], dim=dim)
    while size > 1:
        size //= 2
        x = x.narrow(dim, 0, size) + x.narrow(dim, size, size)
    return x.squeeze(dim)


def merge_partials(out_parts: torch.Tensor, lse_parts: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge per-part attention into the whole.

    :param out_parts: (T, S, H, D) per-part outputs (any float dtype; a part with lse -inf may
        hold anything, it is never read).
    :param lse_parts: (T, S, H) natural-log sum-exp of each part's scores, -inf = no keys.
    :returns: (T, H, D) output and (T, H) lse, in float64 when ``lse_parts`` is float64, else
        float32; a row with no keys in any part gives zeros and -inf.
    """
    dtype = torch.float64 if lse_parts.dtype == torch.float64 else torch.float32
    lse = lse_parts.to(dtype)
    top = lse.amax(dim=1, keepdim=True)  # NOTE: a max is exact in any order
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weight = torch.exp(lse - top)  # (T, S, H); -inf -> 0
    part = out_parts.to(dtype) * weight[..., None]
    part = torch.where(weight[..., None] > 0, part, torch.zeros_like(part))  # empty parts: exact 0
    total = tree_sum(weight, dim=1)  # (T, H)
    out = tree_sum(part, dim=1) / torch.where(total > 0, total, torch.ones_like(total))[..., None]
    return out, top.squeeze(1) + torch.log(total)
