"""Batch-invariant kernels for ``deterministic = true`` (docs/internals.md "Deterministic mode").

CPU ``torch.mm`` is not batch invariant: the bits of a row's result change with the number of rows
in the matrix. A kernel of fixed shape is: every function here pads the rows to a multiple of
``BLOCK_ROWS`` and runs the same fixed-shape op block by block, so a row's output depends only on
that row (and the weights), never on how many rows share the batch or where the row sits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

BLOCK_ROWS = 16


def _blockwise(x: torch.Tensor, op: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Apply ``op`` to ``x`` (..., d) in zero-padded blocks of ``BLOCK_ROWS`` rows."""
    lead = x.shape[:-1]
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n == 0:
        out = op(torch.zeros(BLOCK_ROWS, x.shape[-1], dtype=x.dtype, device=x.device))
        return out.new_empty(*lead, out.shape[-1])
    padded_n = -(-n // BLOCK_ROWS) * BLOCK_ROWS
    if padded_n != n:
        rows = torch.cat([rows, rows.new_zeros(padded_n - n, rows.shape[1])])
    else:
        rows = rows.contiguous()
    outs = [op(rows[i : i + BLOCK_ROWS]) for i in range(0, padded_n, BLOCK_ROWS)]
    out = torch.cat(outs)[:n]
    return out.reshape(*lead, out.shape[-1])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed in fixed blocks of 16 rows: (..., in) -> (..., out)."""
    out = _blockwise(x, lambda blk: F.linear(blk, weight))
    if bias is not None:
        out = out + bias
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0) -> torch.Tensor:
    """Row-wise RMSNorm as Hugging Face computes it (float32 statistics, cast back, times weight).

    ``offset=1.0`` gives the ``(1 + w)`` variant some hybrid models use.
    """
    return _blockwise(x, lambda blk: rmsnorm_reference(blk, weight, eps, offset))


def rmsnorm_reference(
    x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0
) -> torch.Tensor:
    """The plain (not batch-invariant) RMSNorm formula, shared by both paths."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    w = weight + offset if offset else weight
    return w * h.to(dtype)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise float32 log-softmax over the last dimension."""
    return _blockwise(x.to(torch.float32), lambda blk: torch.log_softmax(blk, dim=-1))


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise float32 softmax over the last dimension."""
    return _blockwise(x.to(torch.float32), lambda blk: torch.softmax(blk, dim=-1))


def gated_activation(
    gate: torch.Tensor, up: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``act(gate) * up`` in 16-row blocks.

    NOTE: element-wise transcendental ops are not position-free on CPU: torch runs the vectorized
    body and a scalar tail with different rounding, and where the tail falls depends on the size.
    """
    width = gate.shape[-1]
    both = torch.cat([gate, up], dim=-1)
    return _blockwise(both, lambda blk: act(blk[:, :width]) * blk[:, width:])
