"""Batch-invariant softmax and log-softmax on CUDA: one Triton program per row, fixed order.

The row is read in blocks of ``BLOCK`` columns (a function of the row width only). Each lane
keeps a running maximum and a rescaled sum over its columns in ascending order; the lanes are
combined by one fixed tree at the end; a second pass writes ``x - logsumexp`` (or
``exp(x - max) / sum``). Float32 out, whatever the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, V, stride_x, stride_out, LOG: tl.constexpr,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * stride_x
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        base = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - base) + tl.exp(x - base)
        m = m_new
    mx = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - mx), axis=0)
    lse = mx + tl.log(total)
    out_row = out_ptr + row * stride_out
    for start in range(0, V, BLOCK):
        mask = start + offs < V
        x = tl.load(x_row + start + offs, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            y = x - lse
        else:
            y = tl.exp(x - mx) / total
        tl.store(out_row + start + offs, y, mask=mask)


def _rowwise(x: torch.Tensor, log: bool) -> torch.Tensor:
    v = x.shape[-1]
    rows = x.reshape(-1, v)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape, dtype=torch.float32, device=x.device)
    if rows.shape[0] and v:
        block = min(triton.next_power_of_2(v), MAX_BLOCK)
        _softmax_kernel[(rows.shape[0],)](rows, out, v, rows.stride(0), out.stride(0), LOG=log,
                                          BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return out.reshape(x.shape)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise float32 log-softmax over the last dimension."""
    return _rowwise(x, log=True)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise float32 softmax over the last dimension."""
    return _rowwise(x, log=False)
