"""Attention backend ``triton``: paged attention in Triton, batch invariant and CUDA-graph capable.

The kernels (``hinge.builtin.triton_kernels``) split every request's keys at absolute positions
(``split_size`` keys, default 256) and fold the splits in ascending order, so a query's bits
depend only on its own position and keys: the same alone, in any batch, for any prefill
chunking, and for a prefill row and a decode row of the same position (a prefix-cache hit equals
a cold rescore). Accumulation is float32; q/k/v are bfloat16, float16 or float32.

Per step the metadata is two small int32 arrays, ``cu_q`` (row offsets) and ``kv_lens``, built on
the host from the batch's host lists and copied once; everything else the kernels derive on the
device. For a CUDA graph the same arrays live in one static buffer (``init_graph_buffers``) that
``prepare_for_replay`` refills: live rows first, then padding that reads no key and writes zeros.

On CPU the kernels run only under Triton's interpreter (``TRITON_INTERPRET=1``, the tests); the
spec claims CUDA alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hinge.builtin.plugin import TRITON_ATTENTION
from hinge.builtin.triton_kernels import interpreter_requested, kernels
from hinge.builtin.triton_kernels.launch import paged_attention
from hinge.builtin.triton_options import TritonAttentionOptions
from hinge.contracts import AttentionBackend, AttentionLayer
from hinge.devices import to_device

if TYPE_CHECKING:
    from hinge.forward import ForwardBatch, KVCache

#: a step whose requests all run at most this many new tokens is decode shaped (decode, verify)
DECODE_ROWS = 16
#: programs per SM the split mode aims for
PROGRAMS_PER_SM = 4


@dataclass
class TritonAttentionMetadata:
    """What the kernels read besides q/k/v and the page table (all int32 on the device)."""

    cu_q: torch.Tensor  #: (num_requests + 1,) first q row of each request, then the row count
    kv_lens: torch.Tensor  #: (num_requests,) keys per request (prefix + new); 0 = padding
    num_requests: int
    fold: bool  #: one kernel folds each row's splits; else split partials + combine
    max_splits: int  #: splits a row may need (size of the split partials)
    graph: bool = False  #: lives in the static graph buffer


def host_layout(extend_lens: list[int], prefix_lens: list[int], num_requests: int,
                num_tokens: int) -> list[int]:
    """``cu_q + kv_lens`` for ``num_requests`` slots: the live requests first, then empty ones,
    the last slot holding every row past the live ones with no key (padding reads nothing)."""
    live = len(extend_lens)
    assert live <= num_requests, f"{live} live requests for {num_requests} slots"
    cu = [0]
    for e in extend_lens:
        cu.append(cu[-1] + e)
    assert cu[-1] <= num_tokens, f"{cu[-1]} live rows for a step of {num_tokens}"
    if num_requests > live:  # empty slots, then the slot that owns the padded rows
        cu += [cu[-1]] * (num_requests - live - 1) + [num_tokens]
    kv = [p + e for p, e in zip(prefix_lens, extend_lens, strict=True)]
    return cu + kv + [0] * (num_requests - live)


class TritonAttentionBackend(AttentionBackend):
    capabilities = TRITON_ATTENTION.capabilities

    def __init__(self, options: TritonAttentionOptions | None = None, build: Any = None) -> None:
        self.options = options or TritonAttentionOptions()
        self.build = build
        if build is None or not getattr(build, "page_size", None):
            raise ValueError("TritonAttentionBackend needs build.page_size (BuildContext.page_size)")
        self.page_size = int(build.page_size)
        self.split_size = self.options.split_size
        self._graph_buf: torch.Tensor | None = None
        self._graph_slots = 0
        self._graph_metas: dict[tuple[int, int, bool], TritonAttentionMetadata] = {}
        self._target: dict[torch.device, int] = {}

    # -- per step (eager) ---------------------------------------------------------------------

    def prepare_metadata(self, batch: ForwardBatch) -> TritonAttentionMetadata:
        ext, pre = batch.extend_lens_cpu, batch.prefix_lens_cpu
        device = batch.page_table.device
        layout = host_layout(ext, pre, len(ext), sum(ext))
        buf = to_device(layout, torch.int32, device)
        r = len(ext)
        max_kv = max((p + e for p, e in zip(pre, ext, strict=True)), default=0)
        splits = max(1, -(-max_kv // self.split_size))
        return TritonAttentionMetadata(buf[: r + 1], buf[r + 1:], r, self._fold(ext, splits), splits)

    def _fold(self, extend_lens: list[int], splits: int) -> bool:
        mode = self.options.split_kv
        if mode != "auto":
            return mode == "never"
        return splits <= 1 or max(extend_lens, default=0) > DECODE_ROWS

    # -- per layer ----------------------------------------------------------------------------

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        kv: KVCache,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        if not layer.causal:
            raise ValueError(f"triton attention: layer {layer.kv_layer_id} is not causal; use "
                             "attention=torch for bidirectional layers")
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        k_cache.index_copy_(0, batch.out_loc, k if k.dtype == k_cache.dtype else k.to(k_cache.dtype))
        v_cache.index_copy_(0, batch.out_loc, v if v.dtype == v_cache.dtype else v.to(v_cache.dtype))
        meta = batch.attn_metadata
        if meta is None:
            meta = batch.attn_metadata = self.prepare_metadata(batch)
        assert kv.page_size == self.page_size, (
            f"backend built for page_size {self.page_size}, KV pool has {kv.page_size}")
        interpret = q.device.type != "cuda"
        if interpret and not interpreter_requested():
            raise RuntimeError("the triton attention backend runs on CUDA; on CPU only under "
                               "Triton's interpreter (TRITON_INTERPRET=1, for tests)")
        return paged_attention(
            kernels(interpret), q, k_cache, v_cache, batch.page_table, meta.cu_q, meta.kv_lens,
            num_requests=meta.num_requests, num_kv_heads=layer.num_kv_heads, scale=layer.scale,
            window=layer.sliding_window, page_size=self.page_size, split_size=self.split_size,
            fold=meta.fold, max_splits=meta.max_splits, target_programs=self._target_programs(q.device),
            upcast=interpret or q.dtype == torch.float32,
        )

    def _target_programs(self, device: torch.device) -> int:
        if device not in self._target:
            sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
            self._target[device] = PROGRAMS_PER_SM * sms
        return self._target[device]

    # -- CUDA graphs (protocol: hinge.contracts.AttentionBackend) -----------------------------

    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int,
                           max_pages: int | None = None) -> None:
        """One int32 static buffer holds ``cu_q`` and ``kv_lens`` of every captured shape (a shape
        with ``P`` padded requests uses ``P + 1`` slots: the last one takes the padded rows)."""
        slots = max_batch_size + 1
        device = torch.device(getattr(self.build, "device", "cuda"))
        self._graph_buf = torch.zeros(2 * slots + 1, dtype=torch.int32, device=device)
        self._graph_slots = slots
        self._graph_metas.clear()

    def prepare_for_capture(self, batch: ForwardBatch) -> None:
        """Metadata of the captured shape, in the static buffer, set to all padding."""
        padded = int(batch.extend_lens.shape[0])
        meta = self._graph_meta(batch, padded)
        self._fill(meta, [], [], batch.num_tokens)
        batch.attn_metadata = meta

    def prepare_for_replay(self, batch: ForwardBatch, padded_batch_size: int) -> None:
        """Refill the live rows from the host lists; every other slot reads no key (invariant 4)."""
        meta = self._graph_meta(batch, padded_batch_size)
        self._fill(meta, batch.extend_lens_cpu, batch.prefix_lens_cpu, batch.num_tokens)
        batch.attn_metadata = meta

    def _graph_meta(self, batch: ForwardBatch, padded: int) -> TritonAttentionMetadata:
        if self._graph_buf is None:
            raise RuntimeError("triton attention: init_graph_buffers was not called before capture")
        if padded + 1 > self._graph_slots:
            raise ValueError(f"triton attention: a graph of {padded} requests exceeds "
                             f"init_graph_buffers(max_batch_size={self._graph_slots - 1})")
        mode = self.options.split_kv
        fold = mode == "never" or (mode == "auto" and batch.phase not in ("decode", "verify"))
        key = (padded, batch.num_tokens, fold)
        if key not in self._graph_metas:
            r = padded + 1
            max_keys = int(batch.page_table.shape[1]) * self.page_size
            self._graph_metas[key] = TritonAttentionMetadata(
                self._graph_buf[: r + 1], self._graph_buf[r + 1: 2 * r + 1], r, fold,
                max(1, math.ceil(max_keys / self.split_size)), graph=True)
        return self._graph_metas[key]

    def _fill(self, meta: TritonAttentionMetadata, extend_lens: list[int], prefix_lens: list[int],
              num_tokens: int) -> None:
        max_keys = meta.max_splits * self.split_size
        longest = max((p + e for p, e in zip(prefix_lens, extend_lens, strict=True)), default=0)
        if longest > max_keys:
            raise ValueError(f"triton attention: a request of {longest} tokens exceeds the "
                             f"{max_keys} keys the captured graph's page table covers")
        layout = host_layout(extend_lens, prefix_lens, meta.num_requests, num_tokens)
        host = torch.tensor(layout, dtype=torch.int32)
        dst = self._graph_buf[: len(layout)]
        if dst.is_cuda:
            dst.copy_(host.pin_memory(), non_blocking=True)
        else:
            dst.copy_(host)
