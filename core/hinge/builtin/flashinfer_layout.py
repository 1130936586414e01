"""A step's requests as flashinfer's paged-KV layout, and the padding of captured graph shapes.

Pure torch (flashinfer is not imported here). flashinfer describes a batch of ``B`` requests by
CSR arrays (int32); with ``s_i = prefix_i + extend_i`` tokens and ``n_i = ceil(s_i / page_size)``
pages for request ``i``::

    qo_indptr      [0, e0, e0+e1, ...]                  B+1   query rows of each request
    kv_indptr      [0, n0, n0+n1, ...]                  B+1   pages of each request
    kv_indices     [ pages of r0 | pages of r1 | ... ]  sum(n_i)   page ids, from the page table
    last_page_len  [s_i - (n_i - 1) * page_size]        B     tokens in each request's last page

A request with ``s_i = 0`` (an empty padding request) has no page and ``last_page_len`` 0. The
host arrays come from the batch's host lists (no device sync); the page ids are gathered on the
device from ``batch.page_table``. Requests past ``num_live`` are padding: their pages are all
page 0, the reserved page whose contents are garbage and whose outputs nobody reads; how many
rows each padding request of a captured shape has is ``hinge.batching.pad_extend_lens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from hinge.devices import to_device


@dataclass(frozen=True)
class PagedLayout:
    qo_indptr: list[int]
    kv_indptr: list[int]
    last_page_len: list[int]
    kv_lens: list[int]  #: tokens of each request in the KV pool (prefix + extend)
    #: requests ``0..num_live-1`` read their pages from page-table rows ``0..num_live-1``
    num_live: int

    @property
    def batch_size(self) -> int:
        return len(self.last_page_len)

    @property
    def num_tokens(self) -> int:
        return self.qo_indptr[-1]

    @property
    def num_pages(self) -> int:
        return self.kv_indptr[-1]

    def host_tensors(self, pinned: bool) -> PlanTables:
        """The CSR arrays and the KV lengths as int32 CPU tensors; pinned for CUDA, so a plan's
        copies to the device do not wait for the work already queued."""
        out = [torch.tensor(a, dtype=torch.int32) for a in (self.qo_indptr, self.kv_indptr,
                                                             self.last_page_len, self.kv_lens)]
        if pinned:
            out = [t.pin_memory() for t in out]
        return PlanTables(*out)


class PlanTables(NamedTuple):
    """The host side of a plan (int32 CPU tensors)."""

    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    last_page_len: torch.Tensor
    kv_lens: torch.Tensor  #: passed as ``seq_lens``, so flashinfer copies pinned memory


def paged_layout(prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                 num_live: int | None = None) -> PagedLayout:
    """The CSR arrays of requests with these lengths (host lists, any padding rows included)."""
    assert len(prefix_lens) == len(extend_lens), (
        f"{len(prefix_lens)} prefix lengths but {len(extend_lens)} extend lengths")
    qo, kv, last, seqs = [0], [0], [], []
    for prefix, extend in zip(prefix_lens, extend_lens, strict=True):
        seq = prefix + extend
        pages = -(-seq // page_size)
        qo.append(qo[-1] + extend)
        kv.append(kv[-1] + pages)
        last.append(seq - (pages - 1) * page_size if pages else 0)
        seqs.append(seq)
    live = len(last) if num_live is None else num_live
    assert 0 <= live <= len(last), f"num_live {live} outside 0..{len(last)}"
    return PagedLayout(qo, kv, last, seqs, live)


def live_page_offsets(layout: PagedLayout, width: int) -> np.ndarray:
    """Flat offsets into a (rows, ``width``) page table of every live page, in layout order:
    ``i * width + j`` for ``j < n_i`` of each live request ``i``."""
    live = layout.num_live
    counts = np.diff(np.asarray(layout.kv_indptr[: live + 1], dtype=np.int64))
    if len(counts) and counts.max() > width:
        raise ValueError(f"a request needs {int(counts.max())} pages but the page table holds "
                         f"{width} per row")
    starts = np.repeat(np.arange(live, dtype=np.int64) * width - layout.kv_indptr[:live], counts)
    return starts + np.arange(int(counts.sum()), dtype=np.int64)


def gather_page_indices(page_table: torch.Tensor, layout: PagedLayout) -> torch.Tensor:
    """``kv_indices`` (int32, on the page table's device): row ``i < num_live`` contributes
    ``page_table[i, :n_i]``, padding rows page 0. One host-to-device copy, no sync."""
    out = torch.zeros(layout.num_pages, dtype=torch.int32, device=page_table.device)
    offsets = live_page_offsets(layout, int(page_table.shape[1]))
    if len(offsets):
        assert layout.num_live <= page_table.shape[0], (
            f"{layout.num_live} live requests but the page table has {page_table.shape[0]} rows")
        index = to_device(offsets, torch.int64, page_table.device)
        out[: len(offsets)] = torch.take(page_table, index)
    return out


def gather_page_indices_into(page_table: torch.Tensor, layout: PagedLayout, out: torch.Tensor,
                             index_buf: torch.Tensor, value_buf: torch.Tensor) -> torch.Tensor:
    """``gather_page_indices`` into static buffers, allocating no device memory (a graph
    replay's tables): ``out`` int32, ``index_buf``/``value_buf`` int64 scratch of the same size.
    Returns ``out[:num_pages]``."""
    total = layout.num_pages
    if total > out.numel():
        raise ValueError(f"the step reads {total} KV pages; the static buffer holds {out.numel()}")
    offsets = live_page_offsets(layout, int(page_table.shape[1]))
    live = len(offsets)
    if live:
        host = torch.from_numpy(offsets)
        if index_buf.is_cuda:
            host = host.pin_memory()
        index_buf[:live].copy_(host, non_blocking=True)
        torch.index_select(page_table.reshape(-1), 0, index_buf[:live], out=value_buf[:live])
        out[:live].copy_(value_buf[:live])
    out[live:total].zero_()
    return out[:total]
