"""Attention backend ``flashinfer``: paged prefill and decode with flashinfer's kernels (CUDA).

Per step ``prepare_metadata`` turns the batch into flashinfer's paged layout
(``hinge.builtin.flashinfer_layout``) and plans one wrapper per layer signature
(``hinge.builtin.flashinfer_runtime.Signature``: heads, head dim, scale, window, soft cap), on the
host and outside any graph. Every layer then writes its new k/v at ``batch.out_loc`` and runs the
planned wrapper over views of the pool:

- a step whose requests all run one token: ``BatchDecodeWithPagedKVCacheWrapper`` (through the
  tensor-core kernel for GQA groups of 4 or more, option ``decode_tensor_cores``);
- any other step (prefill, a cached prefix, mixed prefill + decode, verify):
  ``BatchPrefillWithPagedKVCacheWrapper`` over all rows, causal, bottom-right aligned.

hinge's pool keeps per layer K as (num_pages * page_size, kv_heads, head_dim); flashinfer's NHD
layout (num_pages, page_size, kv_heads, head_dim) is a view of the same memory. CUDA graphs:
``hinge.builtin.flashinfer_graphs``. flashinfer is imported when the backend is built, never when
this module is imported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from hinge.builtin.flashinfer_graphs import DECODE_PHASES, GraphShape, GraphState
from hinge.builtin.flashinfer_layout import (
    PagedLayout,
    PlanTables,
    gather_page_indices,
    paged_layout,
)
from hinge.builtin.flashinfer_options import FlashInferOptions
from hinge.builtin.flashinfer_runtime import (
    PlannedWrapper,
    Signature,
    jit_cache_dir,
    load_flashinfer,
    use_tensor_core_decode,
)
from hinge.builtin.plugin import FLASHINFER_ATTENTION
from hinge.contracts import AttentionBackend, AttentionLayer
from hinge.forward import ForwardBatch
from hinge.layers.kv_write import write_kv

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hinge.forward import KVCache

logger = logging.getLogger(__name__)


@dataclass
class FlashInferMetadata:
    """One step's flashinfer tables and its planned wrappers (by layer signature)."""

    kind: str  #: "decode" (one row per request) or "prefill" (varlen, causal)
    layout: PagedLayout
    tables: PlanTables  #: host qo/kv indptr, last_page_len, kv lengths
    indices: torch.Tensor  #: kv_indices on the device
    wrappers: dict[Signature, PlannedWrapper] = field(default_factory=dict)
    graph: GraphShape | None = None  #: set when the wrappers are a captured shape's


class FlashInferAttentionBackend(AttentionBackend):
    capabilities = FLASHINFER_ATTENTION.capabilities

    def __init__(self, options: FlashInferOptions | None = None, build: Any = None, *,
                 flashinfer: Any = None) -> None:
        """:param flashinfer: the flashinfer module (tests pass a fake); None = import it now."""
        if build is None or not getattr(build, "page_size", None):
            raise ValueError("FlashInferAttentionBackend needs a BuildContext with page_size")
        self.options = options if options is not None else FlashInferOptions()
        self.dtype: torch.dtype = build.dtype
        self.page_size: int = int(build.page_size)
        self.device = torch.device(build.device)
        self.fi = flashinfer if flashinfer is not None else load_flashinfer(self.options.jit_cache_base)
        # float workspace (split-KV partials), shared by every wrapper; zeroed before first use
        self.workspace = torch.zeros(self.options.workspace_mb << 20, dtype=torch.uint8,
                                     device=self.device)
        #: layer signatures seen (warmup or a forward), planned by every later step, in order
        self.signatures: dict[Signature, None] = {}
        self._eager: dict[tuple[str, Signature], PlannedWrapper] = {}
        self._graphs: GraphState | None = None
        self._captured: dict[GraphShape, FlashInferMetadata] = {}
        self._pinned = self.device.type == "cuda"

    # -- per step -----------------------------------------------------------------------------

    def prepare_metadata(self, batch: ForwardBatch) -> FlashInferMetadata:
        layout = paged_layout(batch.prefix_lens_cpu, batch.extend_lens_cpu, self.page_size)
        kind = "decode" if all(e == 1 for e in batch.extend_lens_cpu) else "prefill"
        meta = FlashInferMetadata(kind, layout, layout.host_tensors(self._pinned),
                                  gather_page_indices(batch.page_table, layout))
        for sig in self.signatures:
            self._plan(meta, sig)
        return meta

    def _plan(self, meta: FlashInferMetadata, sig: Signature) -> PlannedWrapper:
        wrapper = meta.wrappers.get(sig)
        if wrapper is None:
            if meta.graph is not None:
                assert self._graphs is not None
                wrapper = self._graphs.wrapper(self.fi, self.workspace, meta.graph, sig, self.options)
            else:
                key = (meta.kind, sig)
                if key not in self._eager:
                    self._eager[key] = self._eager_wrapper(meta.kind, sig)
                wrapper = self._eager[key]
            meta.wrappers[sig] = wrapper
        wrapper.plan(sig, self.dtype, self.page_size, meta.tables, meta.indices)
        return wrapper

    def _eager_wrapper(self, kind: str, sig: Signature) -> PlannedWrapper:
        if kind == "decode":
            inner = self.fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD",
                use_tensor_cores=use_tensor_core_decode(self.options.decode_tensor_cores, sig))
        else:
            inner = self.fi.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD",
                                                                 backend=self.options.backend)
        return PlannedWrapper(inner, kind, self.device, self.options.decode_split_kv)

    # -- per layer ----------------------------------------------------------------------------

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: AttentionLayer,
                kv: KVCache, batch: ForwardBatch, *, kv_saved: bool = False) -> torch.Tensor:
        if not kv_saved:  # else the layer stored them (capabilities.kv_written_by_layer)
            write_kv(kv, layer.kv_layer_id, batch.out_loc, k, v)
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        meta = batch.attn_metadata
        if not isinstance(meta, FlashInferMetadata):
            meta = batch.attn_metadata = self.prepare_metadata(batch)
        assert kv.page_size == self.page_size, (
            f"flashinfer backend built for page_size {self.page_size}, KV pool has {kv.page_size}")
        if q.dtype != self.dtype:
            raise ValueError(f"flashinfer backend was planned for {self.dtype} queries, got {q.dtype}")
        sig = Signature.of(layer)
        wrapper = meta.wrappers.get(sig)
        if wrapper is None:  # a layer signature no step has planned yet
            self._refuse_plan_while_capturing(sig)
            self.signatures[sig] = None
            wrapper = self._plan(meta, sig)
        pages = (kv.num_pages, kv.page_size, layer.num_kv_heads, layer.head_dim)
        q = q.contiguous()
        return wrapper.run(q, (k_cache.view(pages), v_cache.view(pages)), torch.empty_like(q))

    def _refuse_plan_while_capturing(self, sig: Signature) -> None:
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                f"flashinfer: layer signature {sig} was never planned and a plan cannot run inside "
                "a CUDA graph capture; call warmup(layers, kv) or run one eager step before capture")

    # -- start-up -----------------------------------------------------------------------------

    def warmup(self, layers: Sequence[AttentionLayer], kv: KVCache) -> None:
        """Run a prefill and a decode step per layer signature over page 0, so flashinfer compiles
        (or loads from its disk cache) every kernel the engine will launch, before any request or
        capture. Registers the signatures, so every later step plans all of them."""
        reps = {Signature.of(layer): layer for layer in layers}
        for sig in reps:
            self.signatures.setdefault(sig, None)
        logger.info("flashinfer: preparing kernels for %d layer signature(s); JIT cache %s",
                    len(reps), jit_cache_dir())
        for prefix, extend in ((0, 2), (1, 1)):  # prefill (also verify and mixed), then decode
            batch = page0_batch(prefix, extend, kv.page_size, self.device)
            batch.attn_metadata = self.prepare_metadata(batch)
            for layer in reps.values():
                shape = (extend, layer.num_heads, layer.head_dim)
                kv_shape = (extend, layer.num_kv_heads, layer.head_dim)
                q = torch.zeros(shape, dtype=self.dtype, device=self.device)
                kz = torch.zeros(kv_shape, dtype=self.dtype, device=self.device)
                self.forward(q, kz, kz, layer, kv, batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- CUDA graphs (hinge.builtin.flashinfer_graphs) ----------------------------------------

    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int,
                           max_pages: int | None = None) -> None:
        """Static tables for every captured shape: up to ``max_batch_size`` request rows, up to
        ``max_num_tokens`` token rows, ``max_pages`` pages per request (the page-table width)."""
        self._graphs = GraphState(max_batch_size, max_num_tokens, max_pages, self.page_size,
                                  self.device)
        self._captured = {}

    def prepare_for_capture(self, batch: ForwardBatch) -> None:
        """Build the wrappers of ``batch``'s shape on the static buffers, planned for padding rows
        only (a capture fixes the shape; every replay plans the live rows)."""
        graphs = self._require_graphs()
        shape = graphs.shape_of(batch.phase, batch.batch_size, batch.num_tokens)
        meta = self._graph_metadata(shape)
        self._fill(meta, [], [], batch.page_table)
        batch.attn_metadata = meta

    def prepare_for_replay(self, batch: ForwardBatch, padded_batch_size: int) -> None:
        """Plan the captured shape's wrappers for the live rows (host lists, page-table rows
        ``[:B]``) and reset every other row to padding. The shape is the one whose metadata
        ``batch`` carries (the static batch's), else found from the phase and the sizes."""
        meta = batch.attn_metadata
        if not (isinstance(meta, FlashInferMetadata) and meta.graph is not None
                and self._captured.get(meta.graph) is meta):
            meta = self._replayed(batch.phase, padded_batch_size, batch.num_tokens)
        self._fill(meta, batch.prefix_lens_cpu, batch.extend_lens_cpu, batch.page_table)
        batch.attn_metadata = meta

    def _replayed(self, phase: str, num_requests: int, num_tokens: int) -> FlashInferMetadata:
        """The captured shape of these sizes (a decode step may replay a prefill-shaped graph;
        the phase decides only between two shapes of the same sizes)."""
        kind = "decode" if phase in DECODE_PHASES else "prefill"
        same = [(s, m) for s, m in self._captured.items()
                if (s.num_requests, s.num_tokens) == (num_requests, num_tokens)]
        same.sort(key=lambda sm: sm[0].kind != kind)  # the phase's own kind first
        if same:
            return same[0][1]
        return self._graph_metadata(self._require_graphs().shape_of(phase, num_requests, num_tokens))

    def _require_graphs(self) -> GraphState:
        if self._graphs is None:
            raise RuntimeError("flashinfer: call init_graph_buffers before capturing a graph")
        return self._graphs

    def _graph_metadata(self, shape: GraphShape) -> FlashInferMetadata:
        """The shape's metadata: made on first use (its capture), then the same object forever."""
        meta = self._captured.get(shape)
        if meta is None:
            empty = paged_layout([], [], self.page_size)
            meta = FlashInferMetadata(shape.wrapper_kind, empty, empty.host_tensors(False),
                                      torch.zeros(0, dtype=torch.int32), graph=shape)
            self._captured[shape] = meta
        return meta

    def _fill(self, meta: FlashInferMetadata, prefix_lens: Sequence[int],
              extend_lens: Sequence[int], page_table: torch.Tensor) -> None:
        assert meta.graph is not None and self._graphs is not None
        layout = meta.graph.padded(prefix_lens, extend_lens, self.page_size)
        meta.indices = self._graphs.indices(page_table, layout)
        meta.layout = layout
        meta.tables = layout.host_tensors(self._pinned)
        for sig in self.signatures:
            self._plan(meta, sig)


def page0_batch(prefix: int, extend: int, page_size: int, device: torch.device) -> ForwardBatch:
    """One request over the reserved page 0 only (its rows write page 0, whose contents are
    garbage anyway): what ``warmup`` runs."""
    seq = prefix + extend
    pages = -(-seq // page_size)

    def ints(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device)

    return ForwardBatch(
        phase="decode" if extend == 1 and prefix else "prefill",
        input_ids=ints([0] * extend),
        positions=ints(list(range(prefix, seq))),
        extend_lens=ints([extend]),
        prefix_lens=ints([prefix]),
        page_table=torch.zeros(1, pages, dtype=torch.int64, device=device),
        out_loc=ints([p % page_size for p in range(prefix, seq)]),
        logits_indices=ints([extend - 1]),
        extend_lens_cpu=[extend],
        prefix_lens_cpu=[prefix],
    )
