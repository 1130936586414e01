"""Split-KV decode planned over fixed-size chunks at absolute positions (FA4 has no split-KV on
sm_90: one query block per request leaves most SMs idle at small batch and long context).

A decode (or verify) step gives every request ``q`` query tokens at positions ``seq - q ..
seq - 1``. Its keys ``0 .. seq - 1`` are cut into::

    [ chunk 0 | chunk 1 | ... | chunk n-1 | tail                    ]
    0         C         2C    (n-1)C      nC                        seq
    n = min((seq - q) // C, max_splits): full chunks every query sees entirely (non-causal)
    tail = [n C, seq): holds every query position (causal, bottom-right aligned: query j sees
           keys up to seq - q + j)

``C`` (``split_size``, a multiple of the page size) and ``max_splits`` are fixed for the engine,
so a request's parts depend on its own length only, never on the batch. A chunk starts at a page
boundary, so its page-table row is ``pages[c C / page_size :][: C / page_size]``.

Two kernel calls cover a step: every (request, chunk) as a virtual request of ``q`` queries over
``C`` keys (non-causal), and every request's tail (causal); ``hinge_fa4.combine`` merges them.
Everything here is device tensor arithmetic on the step's ``seq_lens`` and page table (no host
sync), so a captured decode graph recomputes it on every replay from its static inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SplitTensors:
    """The two kernel calls of a split step over R request rows of ``q_len`` queries each."""

    num_chunks: int  #: chunk slots per row (``S - 1`` parts besides the tail)
    q_len: int  #: query tokens per request
    chunk_pages: torch.Tensor  #: (R * num_chunks, C / page_size) int32 page rows of the chunks
    chunk_used: torch.Tensor  #: (R * num_chunks,) int32 keys of each chunk: C, or 0 (unused slot)
    chunk_cu_q: torch.Tensor  #: (R * num_chunks + 1,) int32 query offsets: ``arange * q_len``
    tail_pages: torch.Tensor  #: (R, max_pages) int32 page rows from each tail's first page
    tail_used: torch.Tensor  #: (R,) int32 keys of each tail
    tail_cu_q: torch.Tensor  #: (R + 1,) int32 ``arange * q_len``

    @property
    def num_rows(self) -> int:
        return int(self.tail_used.shape[0])


def full_chunks(seq_lens: torch.Tensor, q_len: int, split_size: int, max_splits: int) -> torch.Tensor:
    """(R,) full chunks of each request: ``min((seq - q) // C, max_splits)``, at least 0."""
    return ((seq_lens - q_len) // split_size).clamp(min=0, max=max_splits)


def max_chunks(max_pages: int, page_size: int, split_size: int, max_splits: int) -> int:
    """Chunk slots a row can ever need: a request holds at most ``max_pages * page_size`` keys."""
    return min(max_splits, max(max_pages * page_size - 1, 0) // split_size)


def split_tensors(seq_lens: torch.Tensor, page_table: torch.Tensor, *, q_len: int,
                  page_size: int, split_size: int, max_splits: int, num_chunks: int,
                  out: SplitTensors | None = None) -> SplitTensors:
    """Lay out a split step (module docstring). ``num_chunks`` >= every row's full chunks (the
    batch's largest, or ``max_chunks`` for a captured graph); ``out`` = static buffers to fill
    in place (a graph replay), else fresh tensors.

    :param seq_lens: (R,) int64 keys of each request after this step.
    :param page_table: (R, max_pages) int64 page ids.
    """
    assert split_size % page_size == 0, f"split_size {split_size} is not a multiple of page_size {page_size}"
    rows, width = page_table.shape
    per_chunk = split_size // page_size
    assert num_chunks * per_chunk <= width, (
        f"{num_chunks} chunks of {per_chunk} pages do not fit a page table {width} pages wide")
    device = page_table.device
    n_full = full_chunks(seq_lens, q_len, split_size, max_splits)
    tail_start = n_full * split_size
    slot = torch.arange(num_chunks, device=device)
    chunk_used = torch.where(slot[None, :] < n_full[:, None], split_size, 0).reshape(-1)
    chunk_pages = page_table[:, :num_chunks * per_chunk].reshape(rows * num_chunks, per_chunk)
    cols = (tail_start // page_size)[:, None] + torch.arange(width, device=device)[None, :]
    tail_pages = page_table.gather(1, cols.clamp_(max=width - 1))
    tail_used = seq_lens - tail_start
    if out is None:
        cu = lambda n: torch.arange(n + 1, dtype=torch.int32, device=device) * q_len  # noqa: E731
        return SplitTensors(num_chunks, q_len, chunk_pages.to(torch.int32).contiguous(),
                            chunk_used.to(torch.int32), cu(rows * num_chunks),
                            tail_pages.to(torch.int32).contiguous(), tail_used.to(torch.int32),
                            cu(rows))
    assert (out.num_chunks, out.q_len, out.num_rows) == (num_chunks, q_len, rows), (
        f"static split buffers are for {out.num_rows} rows x {out.num_chunks} chunks x "
        f"{out.q_len} queries, the step has {rows} x {num_chunks} x {q_len}")
    out.chunk_pages.copy_(chunk_pages)
    out.chunk_used.copy_(chunk_used)
    out.tail_pages.copy_(tail_pages)
    out.tail_used.copy_(tail_used)
    return out


def chunk_queries(q: torch.Tensor, split: SplitTensors) -> torch.Tensor:
    """(R q, H, D) queries -> (R num_chunks q, H, D): each row's queries once per chunk slot."""
    r, c, n = split.num_rows, split.num_chunks, split.q_len
    return q.view(r, 1, n, *q.shape[1:]).expand(r, c, n, *q.shape[1:]).reshape(r * c * n, *q.shape[1:])


def gather_parts(split: SplitTensors, out_tail: torch.Tensor, lse_tail: torch.Tensor,
                 out_chunks: torch.Tensor, lse_chunks: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel outputs as ``merge_partials`` takes them: (T, S, H, D) outputs and (T, S, H)
    lse, part 0 the tail, parts 1.. the chunks in order; unused chunk slots get lse -inf.

    :param out_tail: (T, H, D); ``lse_tail``: (H, T) (flash-attn's varlen layout).
    :param out_chunks: (T C, H, D) row-major over (request, chunk, query); ``lse_chunks``: (H, T C).
    """
    r, c, n = split.num_rows, split.num_chunks, split.q_len
    h, d = out_tail.shape[1], out_tail.shape[2]
    outs = torch.cat([out_tail.view(r, n, 1, h, d),
                      out_chunks.view(r, c, n, h, d).transpose(1, 2)], dim=2)
    lses = torch.cat([lse_tail.view(h, r, n, 1),
                      lse_chunks.view(h, r, c, n).transpose(2, 3)], dim=3)  # (H, R, q, S)
    lses = lses.permute(1, 2, 3, 0)  # (R, q, S, H)
    used = torch.cat([torch.ones(r, 1, dtype=torch.bool, device=lses.device),
                      split.chunk_used.view(r, c) > 0], dim=1)  # (R, S)
    lses = torch.where(used[:, None, :, None], lses, torch.full_like(lses, float("-inf")))
    return outs.reshape(r * n, c + 1, h, d), lses.reshape(r * n, c + 1, h)
