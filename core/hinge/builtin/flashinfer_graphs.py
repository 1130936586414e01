"""CUDA-graph state of the flashinfer backend: the static tables and the captured shapes.

A captured kernel reads its tables by address, so the wrappers of every captured shape are
built once with ``use_cuda_graph=True`` (which fixes their number of requests) on views of the
same static buffers, allocated by ``init_graph_buffers``. Before every replay, outside the
graph, a shape's wrappers are planned again: the live requests' rows are refilled and every other
row is reset to padding (DESIGN invariant 4), so nothing of an earlier replay is ever read.

Shapes (``GraphShape``; R request rows, N token rows, padded as ``hinge.batching.pad_extend_lens``
says: padded rows have prefix 0 and their tokens over page 0, possibly none)::

    decode  (R x q, q = N / R)  q = 1: BatchDecodeWithPagedKVCacheWrapper fixed to R requests;
                                q > 1 (a speculative verify): BatchPrefillWithPagedKVCacheWrapper
    prefill (R, N)              BatchPrefillWithPagedKVCacheWrapper fixed to R requests (live ones,
                                then padding requests; an empty one has no rows and no pages)

Static buffers, shared by every shape and every layer signature (each plan writes the same
values)::

    qo_indptr, kv_indptr (int32)      max_batch_size + 1
    last_page_len (int32)             max_batch_size
    kv_indices (int32), and two       max_batch_size * max_pages            live pages
    int64 scratch for its gather      + ceil(max_num_tokens / page_size)    padding pages
                                      + max_batch_size
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from hinge.batching import pad_extend_lens
from hinge.builtin.flashinfer_layout import PagedLayout, gather_page_indices_into, paged_layout
from hinge.builtin.flashinfer_runtime import PlannedWrapper, Signature, use_tensor_core_decode

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hinge.builtin.flashinfer_options import FlashInferOptions

DECODE_PHASES = ("decode", "verify")


@dataclass(frozen=True)
class GraphShape:
    kind: Literal["decode", "prefill"]
    num_requests: int  #: R: request rows the wrappers are fixed to (live + padding)
    num_tokens: int  #: N: token rows of the captured step

    @property
    def tokens_per_row(self) -> int:
        """Query rows per request of a decode shape (1, or k + 1 for a verify)."""
        return self.num_tokens // self.num_requests

    @property
    def wrapper_kind(self) -> str:
        return "decode" if self.kind == "decode" and self.tokens_per_row == 1 else "prefill"

    def padded(self, prefix_lens: Sequence[int], extend_lens: Sequence[int],
               page_size: int) -> PagedLayout:
        """The layout of the live requests followed by this shape's padding requests."""
        if self.kind == "decode":
            q = self.tokens_per_row
            assert all(e == q for e in extend_lens), (
                f"a decode graph of {q} rows per request got extend lengths {list(extend_lens)}")
        extend = pad_extend_lens(list(extend_lens), self.num_tokens, self.num_requests)
        prefix = [*prefix_lens, *[0] * (self.num_requests - len(prefix_lens))]
        return paged_layout(prefix, extend, page_size, num_live=len(extend_lens))


class GraphState:
    """The static buffers (``init_graph_buffers``) and the wrappers of captured shapes."""

    def __init__(self, max_batch_size: int, max_num_tokens: int, max_pages: int | None,
                 page_size: int, device: torch.device):
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.page_size = page_size
        self.device = device
        self.qo_indptr = torch.zeros(max_batch_size + 1, dtype=torch.int32, device=device)
        self.kv_indptr = torch.zeros(max_batch_size + 1, dtype=torch.int32, device=device)
        self.last_page_len = torch.zeros(max_batch_size, dtype=torch.int32, device=device)
        self.kv_indices = self._index_buf = self._value_buf = torch.zeros(0, dtype=torch.int32)
        if max_pages is not None:
            self._allocate_indices(max_pages)

    def _allocate_indices(self, max_pages: int) -> None:
        pages = (self.max_batch_size * max_pages + -(-self.max_num_tokens // self.page_size)
                 + self.max_batch_size)
        self.kv_indices = torch.zeros(pages, dtype=torch.int32, device=self.device)
        self._index_buf = torch.zeros(pages, dtype=torch.int64, device=self.device)
        self._value_buf = torch.zeros(pages, dtype=torch.int64, device=self.device)

    def shape_of(self, phase: str, num_requests: int, num_tokens: int) -> GraphShape:
        """The shape a step of ``phase`` padded to these sizes is captured as."""
        kind: Literal["decode", "prefill"] = "decode" if phase in DECODE_PHASES else "prefill"
        if num_requests > self.max_batch_size or num_tokens > self.max_num_tokens:
            raise ValueError(
                f"flashinfer: a graph of {num_requests} requests / {num_tokens} tokens is larger "
                f"than init_graph_buffers allowed ({self.max_batch_size} / {self.max_num_tokens})")
        if kind == "decode" and num_tokens % num_requests:
            raise ValueError(f"flashinfer: a {phase} graph needs the same rows per request; got "
                             f"{num_tokens} rows for {num_requests} requests")
        return GraphShape(kind, num_requests, num_tokens)

    def indices(self, page_table: torch.Tensor, layout: PagedLayout) -> torch.Tensor:
        """The step's ``kv_indices`` written into the static buffer (no device allocation)."""
        if not self.kv_indices.numel():  # NOTE: init_graph_buffers was given no max_pages
            self._allocate_indices(int(page_table.shape[1]))
        if layout.num_pages > self.kv_indices.numel():
            raise ValueError(
                f"flashinfer: this graph step reads {layout.num_pages} KV pages, more than the "
                f"{self.kv_indices.numel()} the graph buffers hold; pass the page-table width as "
                "max_pages to init_graph_buffers")
        return gather_page_indices_into(page_table, layout, self.kv_indices, self._index_buf,
                                        self._value_buf)

    def wrapper(self, fi: Any, workspace: torch.Tensor, shape: GraphShape, sig: Signature,
                options: FlashInferOptions) -> PlannedWrapper:
        """A graph-mode wrapper of ``shape`` reading the static buffers."""
        n = shape.num_requests
        if shape.wrapper_kind == "decode":
            inner = fi.BatchDecodeWithPagedKVCacheWrapper(
                workspace, "NHD", use_cuda_graph=True,
                use_tensor_cores=use_tensor_core_decode(options.decode_tensor_cores, sig),
                paged_kv_indptr_buffer=self.kv_indptr[: n + 1],
                paged_kv_indices_buffer=self.kv_indices,
                paged_kv_last_page_len_buffer=self.last_page_len[:n],
            )
        else:
            inner = fi.BatchPrefillWithPagedKVCacheWrapper(
                workspace, "NHD", use_cuda_graph=True,
                qo_indptr_buf=self.qo_indptr[: n + 1],
                paged_kv_indptr_buf=self.kv_indptr[: n + 1],
                paged_kv_indices_buf=self.kv_indices,
                paged_kv_last_page_len_buf=self.last_page_len[:n],
                backend=options.backend,
            )
        return PlannedWrapper(inner, shape.wrapper_kind, self.device, options.decode_split_kv)
