"""Attention backend ``fa4``: FlashAttention-4 (``flash_attn.cute``) over hinge's paged KV pool.

Per step ``prepare_metadata`` builds one varlen call's tensors (int32 cumulative query lengths,
keys used per request, the page table); every layer writes its new k/v at ``out_loc`` (flash-attn
appends nothing) and attends with one ``flash_attn_varlen_func`` call: causal, GQA packed, a
sliding window as a left window, the softcap as flash-attn's. The pool's
``(num_pages * page_size, Hkv, D)`` tensors are viewed as ``(num_pages, page_size, Hkv, D)``
pages; page 128 is one key tile on sm_90 (the TMA path).

Decode and verify steps may split (``hinge_fa4.split``): FA4 has no split-KV on sm_90, so one
query block per (request, KV head) leaves most SMs idle at small batch; the step instead runs
every query's fixed-size chunks and its tail as virtual requests of one query in ONE kernel call
(non-causal: a query sees all of each part), then merges them by log-sum-exp in a fixed order in
one Triton kernel (``hinge_fa4.combine``). A split layer launches three kernels on CUDA: the KV
write and the query copy into the slots as one (``hinge_fa4.prepare_triton``), the attention
call, the merge; everything index-like is laid out once per step. Where the layer stored the KV
itself (``kv_saved``) and the step has one query row (batch-1 decode), the slots read that row
through a stride-0 view: two kernels, the attention call and the merge. Layers with a sliding
window never split (their keys are few).

CUDA graphs: the metadata of every captured shape views static buffers (``FA4GraphBuffers``);
``prepare_for_replay`` refills them from the runner's static inputs with device copies (no host
wait), the split layout of a split decode graph included.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import torch

from hinge.batching import pad_extend_lens
from hinge.contracts import AttentionBackend, AttentionLayer
from hinge.devices import to_device
from hinge.layers import fast_triton
from hinge.layers.kv_write import write_kv
from hinge_fa4.combine import merge_parts
from hinge_fa4.kernel import make_kernel
from hinge_fa4.metadata import FA4GraphBuffers, FA4Metadata
from hinge_fa4.options import FA4Options
from hinge_fa4.plugin import FA4_SPEC
from hinge_fa4.split import expand_queries, full_chunks, max_chunks, part_width, split_tensors

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hinge.forward import ForwardBatch, KVCache

logger = logging.getLogger(__name__)

DECODE_PHASES = ("decode", "verify")
#: queries of the warm-up prefill: past one 128-row tile even without GQA packing
WARMUP_PREFILL_TOKENS = 256


class FA4AttentionBackend(AttentionBackend):
    capabilities = FA4_SPEC.capabilities

    def __init__(self, options: FA4Options | None = None, build: Any = None) -> None:
        self.options = options = options or FA4Options()
        self.device = torch.device(build.device if build is not None else "cuda")
        self.page_size = int(build.page_size) if build is not None else 128
        if options.split_size % self.page_size:
            raise ValueError(f"attention backend 'fa4': split_size {options.split_size} is not a "
                             f"multiple of page_size {self.page_size}; set attention_options "
                             f"split_size to a multiple (e.g. {4 * self.page_size})")
        self.kernel = make_kernel(options, self.device)
        self.long_tail = options.split_tail == "long"
        hf = getattr(getattr(build, "model_config", None), "hf_config", None)
        #: KV heads per layer, for ``split_kv = auto`` (refined by ``warmup``)
        self.num_kv_heads = int(getattr(hf, "num_key_value_heads", None) or 8)
        self._graphs: FA4GraphBuffers | None = None
        self._captured: dict[tuple[int, int, int], FA4Metadata] = {}

    # -- per step -----------------------------------------------------------------------------

    def wants_split(self, rows: int) -> bool:
        """``split_kv``: always, never, or auto: when the unsplit step's work tiles (request x
        KV head) would fill at most a quarter of the GPU's SMs.

        Measured on the H200 (132 SMs, GQA 32/8, 4096 keys, docs/benchmarks.md), us a layer,
        unsplit against split: batch 1 (8 tiles) 50.4 / 22.5 (512); batch 4 (32 tiles) 51.8 /
        41.6 (1024) and 44.3 (512); batch 8 (64 tiles) 53.0 / 64.1 (512); batch 16 (128 tiles)
        66.5 / 97.6 (512). Past a quarter, the query copy and the merge cost more than the idle
        SMs."""
        mode = self.options.split_kv
        return mode == "always" or (
            mode == "auto" and 4 * rows * self.num_kv_heads <= self.kernel.num_sms)

    def prepare_metadata(self, batch: ForwardBatch) -> FA4Metadata:
        ext = batch.extend_lens_cpu
        cu = [0]
        for e in ext:
            cu.append(cu[-1] + e)
        seq_lens = batch.seq_lens
        meta = FA4Metadata(to_device(cu, torch.int32, self.device), seq_lens.to(torch.int32),
                           batch.page_table.to(torch.int32).contiguous(), max(ext, default=1))
        q_len = ext[0] if ext else 0
        if (batch.phase in DECODE_PHASES and self.options.split_kv != "never"
                and all(e == q_len for e in ext) and self.wants_split(len(ext))):
            o = self.options
            last = max((p + e - 1 for p, e in zip(batch.prefix_lens_cpu, ext, strict=True)), default=0)
            chunks = full_chunks(last, o.split_size, o.max_splits, self.long_tail)
            if chunks:
                meta.uniform = True
                meta.split = split_tensors(seq_lens, batch.page_table, q_len=q_len,
                                           page_size=self.page_size, split_size=o.split_size,
                                           max_splits=o.max_splits, num_slots=chunks + 1,
                                           long_tail=self.long_tail)
        return meta

    # -- per layer ----------------------------------------------------------------------------

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: AttentionLayer,
                kv: KVCache, batch: ForwardBatch, *, kv_saved: bool = False) -> torch.Tensor:
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        meta = batch.attn_metadata
        if meta is None:
            meta = batch.attn_metadata = self.prepare_metadata(batch)
        pages = (-1, kv.page_size, layer.num_kv_heads, layer.head_dim)
        kp, vp = k_cache.view(pages), v_cache.view(pages)
        window = layer.sliding_window - 1 if layer.sliding_window is not None else None
        if meta.split is not None and window is None:
            return self._split_forward(q, k, v, kp, vp, layer, kv, batch, meta, kv_saved)
        if not kv_saved:  # else the layer stored them (capabilities.kv_written_by_layer)
            write_kv(kv, layer.kv_layer_id, batch.out_loc, k, v)
        out, _ = self.kernel.varlen(
            q, kp, vp, cu_seqlens_q=meta.cu_seqlens_q, seqused_k=meta.seqused_k,
            page_table=meta.page_table, max_seqlen_q=meta.max_seqlen_q, softmax_scale=layer.scale,
            causal=True, window_left=window, softcap=layer.logit_softcap)
        return out

    def _split_forward(self, q, k, v, kp, vp, layer: AttentionLayer, kv: KVCache,
                       batch: ForwardBatch, meta: FA4Metadata, kv_saved: bool) -> torch.Tensor:
        s = meta.split
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        if kv_saved and q.shape[0] == 1 and self.options.split_query_view:
            rows = q.expand(s.num_slots, *q.shape[1:])  # one query row: no copy, no launch
        elif fast_triton.enabled(q, invariant=True) and self._prepare().supports(
                q, k, v, k_cache, v_cache, batch.out_loc):
            rows = self._prepare().write_kv_and_expand(q, k, v, k_cache, v_cache, batch.out_loc,
                                                       s.num_slots, write_kv=not kv_saved)  # one launch
        else:
            if not kv_saved:
                write_kv(kv, layer.kv_layer_id, batch.out_loc, k, v)
            rows = expand_queries(q, s.num_slots)
        out, lse = self.kernel.split_decode(
            rows, kp, vp, seqused_k=s.seqused_k, page_table=s.page_table,
            softmax_scale=layer.scale, softcap=layer.logit_softcap)
        return merge_parts(out, lse, s.num_parts, s.num_slots, q.dtype)

    @staticmethod
    def _prepare():
        from hinge_fa4 import prepare_triton

        return prepare_triton

    # -- start-up -----------------------------------------------------------------------------

    def warmup(self, layers: Sequence[AttentionLayer], kv: KVCache) -> None:
        """Compile (or load from the JIT cache) every kernel variant the engine launches, per
        distinct layer signature: a long prefill, a decode, and a split decode's one call, merge
        and fused copies (layers without a window); each reads page 0 only and writes nothing but
        its discarded output and reserved slot 0 (page 0 holds garbage by contract)."""
        if not layers:
            return
        self.num_kv_heads = max(layer.num_kv_heads for layer in layers)
        signatures = {(layer.num_heads, layer.num_kv_heads, layer.head_dim,
                       layer.sliding_window is not None, layer.logit_softcap): layer for layer in layers}
        started = time.perf_counter()
        variants = sum(self._warm(layer, kv) for layer in signatures.values())
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        logger.info("fa4: %d kernel variant(s) for %d layer signature(s) ready in %.1f s",
                    variants, len(signatures), time.perf_counter() - started)

    def _warm(self, layer: AttentionLayer, kv: KVCache) -> int:
        """Run one layer signature's variants once; returns how many."""
        ints = lambda values: torch.tensor(values, dtype=torch.int32, device=self.device)  # noqa: E731
        shape = (-1, kv.page_size, layer.num_kv_heads, layer.head_dim)
        kp, vp = kv.k[layer.kv_layer_id].view(shape), kv.v[layer.kv_layer_id].view(shape)
        window = layer.sliding_window - 1 if layer.sliding_window is not None else None
        for n in (WARMUP_PREFILL_TOKENS, 1):
            q = torch.zeros(n, layer.num_heads, layer.head_dim, dtype=kp.dtype, device=self.device)
            self.kernel.varlen(q, kp, vp, cu_seqlens_q=ints([0, n]), seqused_k=ints([kv.page_size]),
                               page_table=ints([[0]]), max_seqlen_q=n, softmax_scale=layer.scale,
                               causal=True, window_left=window, softcap=layer.logit_softcap)
        if self.options.split_kv == "never" or window is not None:  # NOTE: windows never split
            return 2
        q = torch.zeros(2, layer.num_heads, layer.head_dim, dtype=kp.dtype, device=self.device)
        out, lse = self.kernel.split_decode(q, kp, vp, seqused_k=ints([kv.page_size, 0]),
                                            page_table=ints([[0], [0]]), softmax_scale=layer.scale,
                                            softcap=layer.logit_softcap)
        merge_parts(out, lse, ints([1]), 2, kp.dtype)
        if fast_triton.enabled(q, invariant=True):  # the fused copies, into reserved slot 0
            kvs = torch.zeros(1, layer.num_kv_heads, layer.head_dim, dtype=kp.dtype, device=self.device)
            self._prepare().write_kv_and_expand(
                q[:1], kvs, kvs, kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id],
                torch.zeros(1, dtype=torch.int64, device=self.device), 2)
            return 4
        return 3

    # -- CUDA graphs --------------------------------------------------------------------------

    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int, max_pages: int) -> None:
        o = self.options
        chunks = max_chunks(max_pages, self.page_size, o.split_size, o.max_splits,
                            self.long_tail) if o.split_kv != "never" else 0
        slots = chunks + 1 if chunks else 0  # NOTE: a graph whose rows never fill a chunk never splits
        self._graphs = FA4GraphBuffers.allocate(
            max_batch_size, max(max_num_tokens, max_batch_size), max_pages, slots,
            part_width(max_pages, self.page_size, o.split_size, o.max_splits, self.long_tail),
            self.device)
        self._captured = {}

    def prepare_for_capture(self, batch: ForwardBatch) -> None:
        if self._graphs is None:
            raise RuntimeError("fa4: prepare_for_capture before init_graph_buffers")
        rows, tokens = batch.batch_size, batch.num_tokens
        q_len = tokens // rows if batch.phase in DECODE_PHASES else None
        meta = self._graphs.metadata(rows, tokens, q_len, split=self.wants_split(rows))
        self._captured[self._key(batch, rows)] = meta
        batch.attn_metadata = meta
        self._refill(meta, batch, rows)

    def prepare_for_replay(self, batch: ForwardBatch, padded_batch_size: int) -> None:
        meta = self._captured.get(self._key(batch, padded_batch_size))
        if meta is None:
            raise RuntimeError(f"fa4: no captured graph of {padded_batch_size} requests and "
                               f"{batch.num_tokens} tokens was prepared")
        batch.attn_metadata = meta
        self._refill(meta, batch, padded_batch_size)

    @staticmethod
    def _key(batch: ForwardBatch, rows: int) -> tuple[int, int, int]:
        # NOTE: logit rows tell a decode shape (one per token) from a prefill shape of the same size
        return rows, batch.num_tokens, int(batch.logits_indices.shape[0])

    def _refill(self, meta: FA4Metadata, batch: ForwardBatch, rows: int) -> None:
        """Live rows from the runner's static inputs, padded rows as ``pad_extend_lens`` lays
        them out (prefix 0, page 0): device copies only."""
        if not meta.uniform:
            ext = pad_extend_lens(list(batch.extend_lens_cpu), batch.num_tokens, rows)
            cu = [0]
            for e in ext:
                cu.append(cu[-1] + e)
            meta.cu_seqlens_q.copy_(to_device(cu, torch.int32, self.device), non_blocking=True)
        seq_lens = batch.prefix_lens + batch.extend_lens
        meta.seqused_k.copy_(seq_lens)
        meta.page_table.copy_(batch.page_table)
        if meta.split is not None:
            o = self.options
            split_tensors(seq_lens, batch.page_table, q_len=meta.split.q_len, page_size=self.page_size,
                          split_size=o.split_size, max_splits=o.max_splits,
                          num_slots=meta.split.num_slots, long_tail=self.long_tail,
                          width=meta.split.page_table.shape[1], out=meta.split)
