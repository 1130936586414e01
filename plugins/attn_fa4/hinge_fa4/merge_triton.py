"""The split decode's merge as one Triton kernel (``hinge_fa4.combine`` states the sums and the
order): one program per (query row, head) reads its row's used parts only, takes the max lse,
then adds ``exp(lse_s - max) o_s`` and the weights part by part in slot order, divides, and
writes the row in the output dtype. Batch invariant: nothing a program does depends on other
rows or on the slot count. Imported on CUDA only (the CPU path is torch; tests interpret it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _merge_kernel(out_ptr, lse_ptr, parts_ptr, dst_ptr, num_slots, heads,
                  so_v, so_h, sl_v, sl_h, sd_t, sd_h,
                  D: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    n = tl.load(parts_ptr + t)
    d = tl.arange(0, BLOCK_D)
    mask = d < D
    base = t * num_slots
    top = tl.full([], float("-inf"), ACC)
    for s in range(0, n):
        top = tl.maximum(top, tl.load(lse_ptr + (base + s) * sl_v + h * sl_h).to(ACC))
    top = tl.where(top == float("-inf"), 0.0, top)
    acc = tl.zeros([BLOCK_D], ACC)
    total = tl.full([], 0.0, ACC)
    for s in range(0, n):
        w = tl.exp(tl.load(lse_ptr + (base + s) * sl_v + h * sl_h).to(ACC) - top)
        o = tl.load(out_ptr + (base + s) * so_v + h * so_h + d, mask=mask, other=0.0).to(ACC)
        acc += tl.where(w > 0, w * o, 0.0)
        total += w
    acc = acc / tl.where(total > 0, total, 1.0)
    tl.store(dst_ptr + t * sd_t + h * sd_h + d, acc.to(dst_ptr.dtype.element_ty), mask=mask)


def merge_parts_triton(out_parts: torch.Tensor, lse_parts: torch.Tensor, num_parts: torch.Tensor,
                       num_slots: int, out_dtype: torch.dtype) -> torch.Tensor:
    """``hinge_fa4.combine.merge_parts`` in one launch: (T, H, D) in ``out_dtype``."""
    v, heads, dim = out_parts.shape
    assert out_parts.stride(2) == 1, "each part's head rows must be contiguous"
    assert lse_parts.shape == (v, heads), f"lse {tuple(lse_parts.shape)} != ({v}, {heads})"
    rows = v // num_slots
    dst = torch.empty(rows, heads, dim, dtype=out_dtype, device=out_parts.device)
    acc = tl.float64 if lse_parts.dtype == torch.float64 else tl.float32
    _merge_kernel[(rows, heads)](
        out_parts, lse_parts, num_parts, dst, num_slots, heads,
        out_parts.stride(0), out_parts.stride(1), lse_parts.stride(0), lse_parts.stride(1),
        dst.stride(0), dst.stride(1), D=dim, BLOCK_D=triton.next_power_of_2(dim), ACC=acc,
        num_warps=1)
    return dst
