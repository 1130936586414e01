"""``sampler.apply_penalties`` on CUDA in one Triton kernel that reads the penalty tables in place.

The torch path gathers each penalised request's ``seen`` and ``counts`` rows out of the
(rows, vocab) tables (``index_select``) and runs about ten full-vocabulary element-wise kernels;
at batch 64 and Qwen3's 151,936-token vocabulary each pass moves ~40 MB. Here one program per
(batch row, ``BLOCK`` token ids) loads the row's logits, and for a penalised row its table rows
through ``table_rows``, and writes the penalised logits once (an unpenalised row is copied).

Same bits as the torch ops: the division is IEEE-rounded (``div_rn``), and the launch turns off
FMA contraction, so ``x - f * c - p * (c > 0)`` rounds after each op as torch's kernels do; every
element is its own arithmetic, so any batch gives a row the same bits (deterministic mode may
take it). Graph-capturable (no host syncs).

``count_tokens`` is the tables' update after a draw (``PenaltyCounts.add`` in torch): one launch
where the torch path's two ``index_put_`` (the accumulating one sorts its indices) took ~350 us of
host time a step at batch 64 on the H200 (``roofline.py --profile sampled``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048


# NOTE: which penalties a step has are runtime flags, not constexprs, and no size specializes: one
# compiled kernel serves every mix of requests, so the start-up warm-up's compile is the only one
@triton.jit(do_not_specialize=("vocab", "stride_x", "stride_o", "stride_seen", "stride_counts",
                               "has_seen", "has_counts"),
            do_not_specialize_on_alignment=("table_ptr", "which_ptr", "rep_ptr", "freq_ptr", "pres_ptr"))
def _penalty_kernel(x_ptr, out_ptr, seen_ptr, counts_ptr, table_ptr, which_ptr, rep_ptr,
                    freq_ptr, pres_ptr, vocab, stride_x, stride_o, stride_seen, stride_counts,
                    has_seen, has_counts, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < vocab
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    out = x
    p = tl.load(which_ptr + row)  # this row's penalty parameters, or -1: no penalty
    if p >= 0:
        table = tl.load(table_ptr + p).to(tl.int64)
        if has_seen != 0:
            rep = tl.load(rep_ptr + p)
            seen = tl.load(seen_ptr + table * stride_seen + cols, mask=mask, other=0)
            penalised = tl.where(x > 0, tl.math.div_rn(x, rep), x * rep)
            out = tl.where(seen != 0, penalised, out)
        if has_counts != 0:
            freq = tl.load(freq_ptr + p)
            pres = tl.load(pres_ptr + p)
            counts = tl.load(counts_ptr + table * stride_counts + cols, mask=mask, other=0.0)
            out = out - freq * counts - pres * (counts > 0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, out, mask=mask)


def penalise_rows(logits: torch.Tensor, seen: torch.Tensor | None, counts: torch.Tensor | None,
                  table_rows: torch.Tensor, which: torch.Tensor, repetition: torch.Tensor,
                  frequency: torch.Tensor, presence: torch.Tensor) -> torch.Tensor:
    """A new (B, V) float32 tensor: ``logits`` with penalty ``which[b]`` applied to row ``b``.

    ``which`` (B,) int32 indexes the P penalised requests' parameters (-1: none); request ``p``
    reads row ``table_rows[p]`` of ``seen`` (R, V) bool and ``counts`` (R, V) float32 (None: no
    repetition, resp. frequency/presence, penalty in the step); ``repetition``, ``frequency``,
    ``presence`` are (P,) or (P, 1) float32."""
    b, vocab = logits.shape
    if logits.dtype != torch.float32 or logits.stride(-1) != 1:
        raise ValueError(f"penalise_rows takes float32 logits with a unit last stride, got "
                         f"{logits.dtype} stride {logits.stride()}; use sampler.apply_penalties")
    out = torch.empty_like(logits)
    if b == 0:
        return out
    seen_u8 = seen.view(torch.uint8) if seen is not None else logits
    counts_t = counts if counts is not None else logits
    _penalty_kernel[(b, triton.cdiv(vocab, BLOCK))](
        logits, out, seen_u8, counts_t, table_rows, which, repetition.reshape(-1),
        frequency.reshape(-1), presence.reshape(-1), vocab, logits.stride(0), out.stride(0),
        seen_u8.stride(0), counts_t.stride(0), int(seen is not None), int(counts is not None),
        BLOCK=BLOCK, num_warps=4, enable_fp_fusion=False)
    return out


# NOTE: as above, nothing specializes: the row count changes with the batch
@triton.jit(do_not_specialize=("n", "stride_seen", "stride_counts"),
            do_not_specialize_on_alignment=("table_ptr", "batch_ptr", "tokens_ptr"))
def _count_kernel(seen_ptr, counts_ptr, table_ptr, batch_ptr, tokens_ptr, n, stride_seen,
                  stride_counts, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    table = tl.load(table_ptr + offs, mask=mask, other=0).to(tl.int64)
    token = tl.load(tokens_ptr + tl.load(batch_ptr + offs, mask=mask, other=0),
                    mask=mask, other=0).to(tl.int64)
    tl.store(seen_ptr + table * stride_seen + token, tl.full((BLOCK,), 1, tl.uint8), mask=mask)
    # NOTE: atomic, so rows that share a table row (several tokens of one request) all count;
    # every count is an integer below 2**24, so the sum is exact in any order (same bits)
    tl.atomic_add(counts_ptr + table * stride_counts + token, tl.full((BLOCK,), 1.0, tl.float32),
                  mask=mask)


COUNT_BLOCK = 128


def count_tokens(seen: torch.Tensor, counts: torch.Tensor, table_rows: torch.Tensor,
                 batch_rows: torch.Tensor, tokens: torch.Tensor) -> None:
    """Mark and count each penalised request's drawn token in place: for every ``p``,
    ``seen[table_rows[p], t] = True`` and ``counts[table_rows[p], t] += 1`` with
    ``t = tokens[batch_rows[p]]``; ``seen`` (R, V) bool and ``counts`` (R, V) float32 with unit
    last strides, ``table_rows`` (P,) rows (repeats count twice, as ``index_put_`` accumulates)
    and ``batch_rows`` (P,) indexes of ``tokens``."""
    if seen.stride(-1) != 1 or counts.stride(-1) != 1 or counts.dtype != torch.float32:
        raise ValueError(f"count_tokens takes bool seen and float32 counts tables with unit last "
                         f"strides, got {seen.dtype} {seen.stride()} and {counts.dtype} "
                         f"{counts.stride()}; use sampler.PenaltyCounts.add")
    n = table_rows.shape[0]
    if n == 0:
        return
    seen_u8 = seen.view(torch.uint8)
    _count_kernel[(triton.cdiv(n, COUNT_BLOCK),)](
        seen_u8, counts, table_rows, batch_rows, tokens, n, seen_u8.stride(0), counts.stride(0),
        BLOCK=COUNT_BLOCK, num_warps=1)
