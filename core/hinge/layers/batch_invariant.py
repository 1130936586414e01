"""Batch-invariant kernels for ``deterministic = true`` (docs/internals.md "Deterministic mode").

A row's result must not depend on how many rows share the batch or where the row sits in it.

- CUDA: Triton kernels (``hinge.layers.batch_invariant_triton``) whose tiling is fixed by the
  shapes a model never changes (weight shape, hidden size, vocabulary), never by the number of
  rows, and that reduce in one fixed order: the GEMM has one tile configuration per weight and no
  split-K, RMSNorm and (log-)softmax run one program per row. Element-wise ops are position-free
  on CUDA and run as they are.
- CPU: ``torch.mm`` is not batch invariant (the bits of a row change with the number of rows), and
  element-wise transcendental ops round differently in the vectorized body and the scalar tail.
  A kernel of fixed shape is: every function pads the rows to a multiple of ``BLOCK_ROWS`` and
  runs the same fixed-shape op block by block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

BLOCK_ROWS = 16
KV_BLOCK = 64  #: keys per block of the deterministic attention (absolute positions)
Q_BLOCK = BLOCK_ROWS
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _on_triton(x: torch.Tensor) -> bool:
    """CUDA tensors of a dtype the Triton kernels take; everything else runs in 16-row blocks."""
    return x.is_cuda and x.dtype in TRITON_DTYPES


@functools.cache
def _triton():
    """``hinge.layers.batch_invariant_triton``, imported on first use (only for CUDA tensors)."""
    from hinge.layers import batch_invariant_triton

    return batch_invariant_triton


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
    """``F.linear`` with batch-invariant bits: (..., in) -> (..., out).

    CUDA: the Triton GEMM (bias added in float32 before the one rounding); elsewhere
    ``blockwise_linear``.
    """
    if _on_triton(x):
        return _triton().linear(x, weight, bias)
    return blockwise_linear(x, weight, bias)


def blockwise_linear(x: torch.Tensor, weight: torch.Tensor,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed in fixed blocks of 16 rows (the CPU path; any device)."""
    out = _blockwise(x, lambda blk: F.linear(blk, weight))
    if bias is not None:
        out = out + bias
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0) -> torch.Tensor:
    """Row-wise RMSNorm as Hugging Face computes it (float32 statistics, cast back, times weight).

    ``offset=1.0`` gives the ``(1 + w)`` variant some hybrid models use.
    """
    if _on_triton(x):
        return _triton().rmsnorm(x, weight + offset if offset else weight, eps)
    return _blockwise(x, lambda blk: rmsnorm_reference(blk, weight, eps, offset))


def rmsnorm_reference(
    x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0
) -> torch.Tensor:
    """The plain (not batch-invariant) RMSNorm formula, shared by both paths."""
    # NOTE: one fused kernel on CUDA (statistics in float32, weight applied before the one
    # rounding to x's dtype) instead of eight; in float32 it is the formula above
    w = weight + offset if offset else weight
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise float32 log-softmax over the last dimension."""
    if _on_triton(x):
        return _triton().log_softmax(x)
    return _blockwise(x.to(torch.float32), lambda blk: torch.log_softmax(blk, dim=-1))


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise float32 softmax over the last dimension."""
    if _on_triton(x):
        return _triton().softmax(x)
    return _blockwise(x.to(torch.float32), lambda blk: torch.softmax(blk, dim=-1))


def gated_activation(
    gate_up: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``act(gate) * up`` of a fused ``[gate | up]`` (..., 2 I) -> (..., I).

    NOTE: element-wise transcendental ops are not position-free on CPU: torch runs the vectorized
    body and a scalar tail with different rounding, and where the tail falls depends on the size;
    so CPU runs 16-row blocks. CUDA applies one device function per element wherever it sits.
    """
    width = gate_up.shape[-1] // 2
    if gate_up.is_cuda:
        return act(gate_up[..., :width]) * gate_up[..., width:]
    return _blockwise(gate_up, lambda blk: act(blk[:, :width]) * blk[:, width:])


def _visible(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    allowed = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        allowed &= k_pos[None, :] > q_pos[:, None] - window
    return allowed


def fixed_split_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix_len: int,
    scale: float,
    window: int | None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Batch-invariant causal attention of one request, float32 out (``softcap``: scores
    become ``softcap * tanh(scores / softcap)``, as ``AttentionLayer.logit_softcap`` says).

    :param q: (E, H, D) queries at positions ``prefix_len .. prefix_len+E-1``.
    :param k: (S, Hkv, D) keys at positions ``0..S-1``; ``v`` likewise.

    Rows are (token, head-in-group) pairs per KV head, in blocks of ``Q_BLOCK`` (padded rows see
    no key); keys are visited in blocks of ``KV_BLOCK`` at absolute positions with an online
    softmax. A block entirely masked for a row leaves that row's state bit-identical, so the rows
    sharing its block never change its result.
    """
    e, h, d = q.shape
    s, g = k.shape[0], k.shape[1]
    rep = h // g
    device = q.device
    rows = e * rep
    padded_rows = -(-rows // Q_BLOCK) * Q_BLOCK
    padded_keys = -(-s // KV_BLOCK) * KV_BLOCK
    qf = q.float().reshape(e, g, rep, d).permute(1, 0, 2, 3).reshape(g, rows, d)
    qf = torch.cat([qf, qf.new_zeros(g, padded_rows - rows, d)], dim=1)
    kf = torch.cat([k.float(), k.new_zeros(padded_keys - s, g, d, dtype=torch.float32)]).transpose(0, 1)
    vf = torch.cat([v.float(), v.new_zeros(padded_keys - s, g, d, dtype=torch.float32)]).transpose(0, 1)
    row_pos = torch.full((padded_rows,), -1, dtype=torch.int64, device=device)
    row_pos[:rows] = torch.arange(prefix_len, prefix_len + e, device=device).repeat_interleave(rep)
    block_k_pos = torch.arange(KV_BLOCK, device=device)
    out = torch.empty(g, padded_rows, d, dtype=torch.float32, device=device)
    neg_inf = float("-inf")
    for start in range(0, padded_rows, Q_BLOCK):
        qb = qf[:, start : start + Q_BLOCK].contiguous()
        pos = row_pos[start : start + Q_BLOCK]
        first_tok, last_tok = start // rep, min(start + Q_BLOCK - 1, rows - 1) // rep
        hi_pos, lo_pos = prefix_len + last_tok, prefix_len + first_tok
        first_blk = max(0, lo_pos - window + 1) // KV_BLOCK if window is not None else 0
        m = torch.full((g, Q_BLOCK, 1), neg_inf, device=device)
        l_sum = torch.zeros(g, Q_BLOCK, 1, device=device)
        acc = torch.zeros(g, Q_BLOCK, d, device=device)
        for blk in range(first_blk, hi_pos // KV_BLOCK + 1):
            k0 = blk * KV_BLOCK
            kb = kf[:, k0 : k0 + KV_BLOCK].contiguous()
            vb = vf[:, k0 : k0 + KV_BLOCK].contiguous()
            allowed = _visible(pos, block_k_pos + k0, window)
            scores = _bmm(qb, kb.transpose(1, 2)) * scale
            if softcap:
                scores = torch.tanh(scores / softcap) * softcap
            scores = scores.masked_fill(~allowed[None], neg_inf)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == neg_inf, 0.0, m_new)
            p = torch.exp(scores - m_safe)
            alpha = torch.exp(m - m_safe)
            l_sum = l_sum * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + _bmm(p, vb)
            m = m_new
        out[:, start : start + Q_BLOCK] = acc / l_sum
    out = out[:, :rows].reshape(g, e, rep, d).permute(1, 0, 2, 3).reshape(e, h, d)
    return out


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm`` as one ``mm`` per KV head: small CPU ``bmm`` calls go through a threaded path
    that costs ~1 ms each on a loaded 2-core machine, ``mm`` of these shapes a few microseconds."""
    if a.is_cuda:
        return torch.bmm(a, b)
    return torch.stack([torch.mm(x, y) for x, y in zip(a, b, strict=True)])
