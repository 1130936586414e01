"""Split-KV decode planned over fixed-size chunks at absolute positions (FA4 has no split-KV on
sm_90: one query block per (request, KV head) leaves most SMs idle at small batch).

A decode (or verify) step gives every request ``q`` query tokens at positions ``seq - q ..
seq - 1``. Each query row ``t`` (query ``j`` of request ``r``, ``t = r q + j``) sees keys
``0 .. p`` with ``p = seq - q + j``; they are cut into::

    [ chunk 0 | chunk 1 | ... | chunk n-1 | tail          ]
    0         C         2C    (n-1)C      nC              p + 1

    short tail (``split_tail = "short"``, the default): n = min(p // C, max_splits) full
    chunks; the tail [n C, p + 1) holds 1 .. C keys
    long tail (``"long"``): n = min(max((p + 1) // C - 1, 0), max_splits); the tail keeps the
    last whole chunk: C .. 2 C - 1 keys once the query sees C
    (either longer only past the max_splits cap)

Which is faster depends on whether the parts fill more than one wave of the GPU. A short tail
of one key (4097 keys at ``C = 512``: 9 parts) is free while its program finds an idle SM; a
long tail puts one more key tile on the longest part (8 parts, one of 513 keys). On an H100
(docs/benchmarks.md, thirteenth session, 4096 keys, KV stored by the layer) batch 1 ran 12.4 us
a layer short and 13.3 long at ``C = 512``; but at ``C = 256`` the short tail's 17 parts x 8 KV
heads (136 programs) spill past 132 SMs into a second wave: 15.3 short, 13.2 long; and at batch
4, ``C = 512``: 34.0 short, 33.1 long.

``C`` (``split_size``, a multiple of the page size) and ``max_splits`` are fixed for the engine,
so a query's parts depend on its own position only, never on the batch. Every part is one
*virtual request* of one query: no causal mask (a query sees all of each of its parts), one
kernel call for the whole step. Row ``t`` owns ``S`` slots ``v = t S + s``: slot 0 its tail,
slots ``1 .. n`` its chunks in order, slots past ``n`` empty (``seqused_k`` 0: the kernel writes
zeros and lse -inf there, and the merge never reads them). A part starts at a page boundary, so
its page-table row is the request's row from that page on.

Everything here is device tensor arithmetic on the step's ``seq_lens`` and page table (no host
sync), once per step in ``prepare_metadata`` / ``prepare_for_replay`` (a captured graph's static
buffers refilled in place); a layer then only copies its queries into the slots
(``expand_queries``), calls the kernel once and merges (``hinge_fa4.combine``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SplitTensors:
    """The one kernel call of a split step: T query rows x S slots = V virtual requests."""

    num_slots: int  #: S: 1 tail + the most chunks a row of this step (or graph) can have
    q_len: int  #: query tokens per request (T = requests x q_len)
    page_table: torch.Tensor  #: (V, W) int32 page ids of each part from its first page
    seqused_k: torch.Tensor  #: (V,) int32 keys of each part (0 = empty slot)
    num_parts: torch.Tensor  #: (T,) int32 used slots of each row: 1 + its full chunks

    @property
    def num_rows(self) -> int:
        return int(self.num_parts.shape[0])

    @property
    def num_chunks(self) -> int:
        return self.num_slots - 1


def full_chunks(positions: torch.Tensor | int, split_size: int, max_splits: int,
                long_tail: bool = False) -> torch.Tensor | int:
    """Full chunks of queries at ``positions`` (a tensor, or one int): ``min(p // C,
    max_splits)``, or with ``long_tail`` ``min(max((p + 1) // C - 1, 0), max_splits)`` (the
    tail keeps the last whole chunk)."""
    n = (positions + 1) // split_size - 1 if long_tail else positions // split_size
    return min(max(n, 0), max_splits) if isinstance(n, int) else n.clamp(min=0, max=max_splits)


def max_chunks(max_pages: int, page_size: int, split_size: int, max_splits: int,
               long_tail: bool = False) -> int:
    """Chunk slots a row can ever need: a query sits at position < ``max_pages * page_size``."""
    return full_chunks(max_pages * page_size - 1, split_size, max_splits, long_tail)


def part_width(max_pages: int, page_size: int, split_size: int, max_splits: int,
               long_tail: bool = False) -> int:
    """Pages a part's page-table row needs: a chunk's ``C / page_size``, a short tail at most as
    many, a long tail's fewer than ``2 C`` keys twice as many, unless ``max_splits`` capped it
    (then up to the rest of the request's pages)."""
    per_chunk = split_size // page_size
    tail = 2 * per_chunk if long_tail else per_chunk
    return min(max_pages, max(tail, max_pages - max_splits * per_chunk))


def query_positions(seq_lens: torch.Tensor, q_len: int) -> torch.Tensor:
    """(R q,) position of each query row: ``seq - q + j`` (-1 for a row of a request with fewer
    than ``q`` keys: a padded row; it gets an empty tail)."""
    j = torch.arange(q_len, device=seq_lens.device)
    return (seq_lens[:, None] - q_len + j[None, :]).reshape(-1).clamp(min=-1)


def split_tensors(seq_lens: torch.Tensor, page_table: torch.Tensor, *, q_len: int,
                  page_size: int, split_size: int, max_splits: int, num_slots: int,
                  long_tail: bool = False, width: int | None = None,
                  out: SplitTensors | None = None) -> SplitTensors:
    """Lay out a split step (module docstring). ``num_slots`` > every row's full chunks (the
    batch's most + 1, or ``max_chunks + 1`` for a captured graph); ``long_tail``: the tail rule
    (module docstring); ``width`` = ``part_width`` of the page table (default); ``out`` = static
    buffers to fill in place (a graph replay), else fresh tensors.

    :param seq_lens: (R,) keys of each request after this step.
    :param page_table: (R, max_pages) page ids.
    """
    assert split_size % page_size == 0, f"split_size {split_size} is not a multiple of page_size {page_size}"
    rows, max_pages = page_table.shape
    per_chunk = split_size // page_size
    width = width or part_width(max_pages, page_size, split_size, max_splits, long_tail)
    device = page_table.device
    pos = query_positions(seq_lens, q_len)  # (T,)
    n_full = full_chunks(pos, split_size, max_splits, long_tail)
    assert num_slots >= 1, "a split step needs at least the tail slot"
    slot = torch.arange(num_slots, device=device)[None, :]  # (1, S)
    is_tail = slot == 0
    used = torch.where(is_tail, pos[:, None] + 1 - n_full[:, None] * split_size,
                       torch.where(slot <= n_full[:, None], split_size, 0))  # (T, S)
    first = torch.where(is_tail, n_full[:, None], slot - 1) * per_chunk  # (T, S) first page
    cols = (first[:, :, None] + torch.arange(width, device=device)).clamp_(max=max_pages - 1)
    request_rows = page_table.repeat_interleave(q_len, dim=0)  # (T, max_pages)
    pages = request_rows.gather(1, cols.view(rows * q_len, -1)).view(-1, width)
    parts = n_full + 1
    if out is None:
        return SplitTensors(num_slots, q_len, pages.to(torch.int32).contiguous(),
                            used.reshape(-1).to(torch.int32), parts.to(torch.int32))
    assert (out.num_slots, out.q_len, out.num_rows, out.page_table.shape[1]) == (
        num_slots, q_len, rows * q_len, width), (
        f"static split buffers are for {out.num_rows} query rows x {out.num_slots} slots x "
        f"{out.page_table.shape[1]} pages, the step has {rows * q_len} x {num_slots} x {width}")
    out.page_table.copy_(pages)
    out.seqused_k.copy_(used.reshape(-1))
    out.num_parts.copy_(parts)
    return out


def expand_queries(q: torch.Tensor, num_slots: int) -> torch.Tensor:
    """(T, H, D) queries -> (T S, H, D): each query row once per slot (row-major over (t, s)),
    the one copy a split layer makes before its kernel call (contiguous even for one row, where
    a reshape would give a stride-0 view: the kernel would compile a broadcast variant)."""
    t = q.shape[0]
    rows = q[:, None].expand(t, num_slots, *q.shape[1:]).reshape(t * num_slots, *q.shape[1:])
    return rows.contiguous()
