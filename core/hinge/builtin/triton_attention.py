"""Attention backend ``triton``: paged attention in Triton, batch invariant and CUDA-graph capable.

The kernels (``hinge.builtin.triton_kernels``) split every request's keys at absolute positions
(``split_size`` keys, default 256) and fold the splits in ascending order, so a query's bits
depend only on its own position and keys: the same alone, in any batch, for any prefill
chunking, and for a prefill row and a decode row of the same position (a prefix-cache hit equals
a cold rescore). Accumulation is float32; q/k/v are bfloat16, float16 or float32.

Per step the metadata is two small int32 arrays, ``cu_q`` (row offsets) and ``kv_lens``, built on
the host from the batch's host lists and copied once; everything else the kernels derive on the
device. For a CUDA graph the same arrays live in one static buffer (``init_graph_buffers``) that
``prepare_for_replay`` refills: the live rows, then the padded rows (``pad_extend_lens``), which
read no key, not even page 0, and write zeros.

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
from hinge.devices import num_sms, to_device
from hinge.layers.kv_write import write_kv
from hinge.static_batch import pad_extend_lens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hinge.forward import ForwardBatch, KVCache

#: a step whose requests all run at most this many new tokens is decode shaped (decode, verify)
DECODE_ROWS = 16
#: programs per SM the split mode aims for
PROGRAMS_PER_SM = 4


@dataclass
class TritonAttentionMetadata:
    """What the kernels read besides q/k/v and the page table (int32, on the device)."""

    cu_q: torch.Tensor  #: (num_requests + 1,) first q row of each request, then the row count
    kv_lens: torch.Tensor  #: (num_requests,) keys per request (prefix + new); 0 = reads nothing
    num_requests: int
    fold: bool  #: one kernel folds each row's splits; else split partials + combine
    max_splits: int  #: splits a row may need (size of the split partials)
    graph: bool = False  #: lives in the static graph buffer


def kv_offset(num_requests: int) -> int:
    """Where ``kv_lens`` starts in a layout: after ``cu_q``, 16-byte aligned (one compiled
    kernel variant whatever the batch size)."""
    return -(-(num_requests + 1) // 4) * 4


def host_layout(q_lens: list[int], kv_lens: list[int]) -> list[int]:
    """``[cu_q | zeros up to kv_offset | kv_lens]`` of one step, as a host list."""
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    return cu + [0] * (kv_offset(len(q_lens)) - len(cu)) + list(kv_lens)


def views(buf: torch.Tensor, num_requests: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cu_q, kv_lens)`` of a layout in ``buf``."""
    at = kv_offset(num_requests)
    return buf[: num_requests + 1], buf[at: at + num_requests]


class TritonAttentionBackend(AttentionBackend):
    capabilities = TRITON_ATTENTION.capabilities

    def __init__(self, options: TritonAttentionOptions | None = None, build: Any = None) -> None:
        self.options = options or TritonAttentionOptions()
        self.build = build
        if build is None or not getattr(build, "page_size", None):
            raise ValueError("TritonAttentionBackend needs build.page_size (BuildContext.page_size)")
        self.page_size = int(build.page_size)
        self.split_size = self.options.split_size
        self.dtype = getattr(build, "dtype", torch.bfloat16)
        self._graph_buf: torch.Tensor | None = None
        self._graph_rows = 0
        self._graph_splits = 1
        self._graph_metas: dict[tuple[int, int], TritonAttentionMetadata] = {}
        self._compiled = None

    # -- per step (eager) ---------------------------------------------------------------------

    def prepare_metadata(self, batch: ForwardBatch) -> TritonAttentionMetadata:
        ext = batch.extend_lens_cpu
        kv = batch.seq_lens_cpu
        buf = to_device(host_layout(ext, kv), torch.int32, batch.page_table.device)
        splits = max(1, -(-max(kv, default=0) // self.split_size))
        return TritonAttentionMetadata(*views(buf, len(ext)), len(ext), self._fold(ext, splits), splits)

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
        *,
        kv_saved: bool = False,
    ) -> torch.Tensor:
        if not layer.causal:
            raise ValueError(f"triton attention: layer {layer.kv_layer_id} is not causal; use "
                             "attention=torch for bidirectional layers")
        interpret = q.device.type != "cuda"
        if interpret and not interpreter_requested():
            raise RuntimeError("the triton attention backend runs on CUDA; on CPU only under "
                               "Triton's interpreter (TRITON_INTERPRET=1, for tests)")
        assert kv.page_size == self.page_size, (
            f"backend built for page_size {self.page_size}, KV pool has {kv.page_size}")
        if not kv_saved:  # else the layer stored them (capabilities.kv_written_by_layer)
            write_kv(kv, layer.kv_layer_id, batch.out_loc, k, v)
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        meta = batch.attn_metadata
        if meta is None:
            meta = batch.attn_metadata = self.prepare_metadata(batch)
        return paged_attention(
            self._kernels(interpret), q, k_cache, v_cache, batch.page_table, meta.cu_q, meta.kv_lens,
            num_requests=meta.num_requests, num_kv_heads=layer.num_kv_heads, scale=layer.scale,
            window=layer.sliding_window, page_size=self.page_size, split_size=self.split_size,
            fold=meta.fold, max_splits=meta.max_splits, target_programs=self._target_programs(q.device),
            upcast=interpret or q.dtype == torch.float32,
        )

    def _kernels(self, interpret: bool):
        if interpret:  # the interpreted copy: loaded (and the interpreter shimmed) on each call
            return kernels(True)
        if self._compiled is None:
            self._compiled = kernels(False)
        return self._compiled

    def _target_programs(self, device: torch.device) -> int:
        return PROGRAMS_PER_SM * num_sms(device, fallback=1)

    # -- start-up ----------------------------------------------------------------------------

    def warmup(self, layers: Sequence[AttentionLayer], kv: KVCache) -> None:
        """Compile both paths (fold; split + combine) for every layer shape before any request or
        capture. Reads page 0 only and writes nothing into the KV pool."""
        k_cache = kv.k[0]
        device = k_cache.device
        interpret = device.type != "cuda"
        if interpret and not interpreter_requested():
            return
        buf = to_device(host_layout([1], [1]), torch.int32, device)
        cu_q, kv_lens = views(buf, 1)
        page_table = torch.zeros(1, 1, dtype=torch.int64, device=device)
        seen = set()
        for layer in layers:
            key = (layer.num_heads, layer.num_kv_heads, layer.head_dim, layer.sliding_window is None)
            if key in seen:
                continue
            seen.add(key)
            q = torch.zeros(1, layer.num_heads, layer.head_dim, dtype=self.dtype, device=device)
            for fold in (True, False):
                paged_attention(
                    self._kernels(interpret), q, kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id],
                    page_table, cu_q, kv_lens, num_requests=1, num_kv_heads=layer.num_kv_heads,
                    scale=layer.scale, window=layer.sliding_window, page_size=self.page_size,
                    split_size=self.split_size, fold=fold, max_splits=2, target_programs=1,
                    upcast=interpret or self.dtype == torch.float32)

    # -- CUDA graphs (protocol: hinge.contracts.AttentionBackend) -----------------------------

    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int, max_pages: int) -> None:
        """One int32 static buffer holds ``cu_q`` and ``kv_lens`` of whichever shape replays (a
        shape's layout depends on its request rows only)."""
        device = torch.device(getattr(self.build, "device", "cuda"))
        size = kv_offset(max_batch_size) + max_batch_size
        self._graph_buf = torch.zeros(size, dtype=torch.int32, device=device)
        self._graph_rows = max_batch_size
        self._graph_splits = max(1, math.ceil(max_pages * self.page_size / self.split_size))
        self._graph_metas.clear()

    def prepare_for_capture(self, batch: ForwardBatch) -> None:
        """The captured shape's metadata, in the static buffer, all padding (reads no key)."""
        meta = self._graph_meta(batch, batch.batch_size)
        self._fill(meta, [], [], batch.num_tokens)
        batch.attn_metadata = meta

    def prepare_for_replay(self, batch: ForwardBatch, padded_batch_size: int) -> None:
        """Refill the live rows from the host lists; every padded row gets its token count
        (``pad_extend_lens``) and no key: it reads nothing, not even page 0, and writes zeros."""
        meta = self._graph_meta(batch, padded_batch_size)
        self._fill(meta, batch.extend_lens_cpu, batch.seq_lens_cpu, batch.num_tokens)
        batch.attn_metadata = meta

    def _graph_meta(self, batch: ForwardBatch, rows: int) -> TritonAttentionMetadata:
        if self._graph_buf is None:
            raise RuntimeError("triton attention: init_graph_buffers must run before a graph is "
                               "captured or replayed")
        if rows > self._graph_rows:
            raise ValueError(f"triton attention: a graph of {rows} request rows exceeds "
                             f"init_graph_buffers(max_batch_size={self._graph_rows})")
        key = (rows, batch.num_tokens)
        if key not in self._graph_metas:
            mode = self.options.split_kv
            fold = mode == "never" or (mode == "auto" and batch.phase not in ("decode", "verify"))
            self._graph_metas[key] = TritonAttentionMetadata(
                *views(self._graph_buf, rows), rows, fold, self._graph_splits, graph=True)
        return self._graph_metas[key]

    def _fill(self, meta: TritonAttentionMetadata, extend_lens: list[int], kv_lens: list[int],
              num_tokens: int) -> None:
        rows = meta.num_requests
        longest = max(kv_lens, default=0)
        if longest > meta.max_splits * self.split_size:
            raise ValueError(f"triton attention: a request of {longest} tokens is longer than the "
                             "page table given to init_graph_buffers (max_pages) covers")
        q_lens = pad_extend_lens(extend_lens, num_tokens, rows)
        host = torch.tensor(host_layout(q_lens, [*kv_lens, *[0] * (rows - len(kv_lens))]),
                            dtype=torch.int32)
        dst = self._graph_buf[: host.numel()]
        if dst.is_cuda:  # NOTE: from pinned memory, queued behind the step in flight: no wait
            dst.copy_(host.pin_memory(), non_blocking=True)
        else:
            dst.copy_(host)
