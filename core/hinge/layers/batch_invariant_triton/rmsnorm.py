"""Batch-invariant RMSNorm on CUDA: one Triton program per row, one fixed reduction tree.

``y = x * rsqrt(mean(x^2) + eps) * w`` with the statistics and the product in float32 and one
rounding to ``x``'s dtype (the formula of ``F.rms_norm``). The block covers the whole row and its
width depends only on the hidden size, so a row is reduced in the same order alone or among any
number of rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_WIDTH = 1 << 16


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, D, stride_x, stride_out, eps,
                    BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, (x * rstd * w).to(out_ptr.dtype.element_ty),
             mask=mask)


def _num_warps(block: int) -> int:
    return 1 if block <= 256 else 4 if block <= 2048 else 8 if block <= 8192 else 16


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Row-wise RMSNorm of ``x`` (..., D) with ``weight`` (D,) (already offset, if the model
    uses ``1 + w``); the result has ``x``'s shape and dtype."""
    d = x.shape[-1]
    if d > MAX_WIDTH:
        raise ValueError(f"batch-invariant RMSNorm supports rows of up to {MAX_WIDTH} elements, "
                         f"got {d}; use the 16-row-block path (hinge.layers.batch_invariant)")
    rows = x.reshape(-1, d)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        block = triton.next_power_of_2(d)
        _rmsnorm_kernel[(rows.shape[0],)](rows, weight, out, d, rows.stride(0), out.stride(0),
                                          eps, BLOCK_D=block, num_warps=_num_warps(block))
    return out.reshape(x.shape)
