"""Group a MoE batch's (token, slot) pairs by expert on the device, padded for a block GEMM.

    pair p = t * k + j  (token t, slot j)      sorted_pairs: [e0 e0 e0 pad | e1 pad pad pad | e3 ...]
    block b (block_m rows) -> block_expert[b]   padded rows hold ``num_pairs`` (masked out)

Only device ops of host-known sizes (no ``.item()``, no ``bincount``, whose CUDA version reads
the maximum on the host), so the Triton grouped GEMM around it can be captured in a CUDA graph.
Plain torch: tested on CPU.
"""

from __future__ import annotations

import torch


def align_pairs(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    """Group the (token, slot) pairs by expert, each group padded to ``block_m`` rows, on the device.

    :returns: ``sorted_pairs`` (max_rows,) int32 (padding = ``num_pairs``), ``block_expert``
        (max_rows // block_m,) int32 (``num_experts`` past the end), ``padded_total`` (1,) int32.
    """
    flat = topk_ids.reshape(-1)
    num_pairs = flat.numel()
    device = flat.device
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    order = torch.argsort(flat, stable=True)
    expert_of = flat.index_select(0, order)
    rank_in_expert = torch.arange(num_pairs, device=device) - (torch.cumsum(counts, 0) - counts)[expert_of]
    dest = (padded_end - padded)[expert_of] + rank_in_expert
    # at most min(E, pairs) groups are non-empty, each padded by at most block_m - 1 rows
    max_rows = -(-(num_pairs + min(num_experts, num_pairs) * (block_m - 1)) // block_m) * block_m
    sorted_pairs = torch.full((max_rows,), num_pairs, dtype=torch.int32, device=device)
    sorted_pairs.index_copy_(0, dest, order.to(torch.int32))
    block_start = torch.arange(0, max_rows, block_m, device=device)
    block_expert = torch.searchsorted(padded_end, block_start, right=True).to(torch.int32)
    return sorted_pairs, block_expert, padded_end[-1:].to(torch.int32)


