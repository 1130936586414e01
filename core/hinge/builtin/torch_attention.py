"""Attention backend ``torch``: the reference paged attention in plain torch (CPU and CUDA).

Per step ``prepare_metadata`` turns the page table into flat KV slots per request (host-side
work once); every layer then writes its new k/v at ``batch.out_loc`` and attends:

- default path: decode requests (one new token) in one padded SDPA call, each prefill/extend
  request in its own causal SDPA call (GQA via ``enable_gqa``; sliding window as a mask);
- deterministic path (``build.deterministic``):
  ``hinge.layers.batch_invariant.fixed_split_attention``, a float32 online softmax over a fixed
  KV split at absolute positions. A query's bits then depend only on its own position and keys:
  the same alone, in any batch, and for any prefill chunking;
- logit softcap (``layer.logit_softcap``; SDPA has none): scores ``cap * tanh(s / cap)`` computed
  per request in float32 (the deterministic path caps inside its online softmax).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from hinge.builtin.plugin import TORCH_ATTENTION
from hinge.contracts import AttentionBackend, AttentionLayer
from hinge.devices import to_device
from hinge.layers.batch_invariant import fixed_split_attention
from hinge.layers.kv_write import write_kv

if TYPE_CHECKING:
    from hinge.forward import ForwardBatch, KVCache


@dataclass
class RequestSlots:
    q_start: int  #: first row of this request in the step's T rows
    prefix_len: int
    seq_len: int
    kv_slots: torch.Tensor  #: (seq_len,) flat KV slots of keys 0..seq_len-1

    @property
    def extend_len(self) -> int:
        return self.seq_len - self.prefix_len


@dataclass
class TorchAttentionMetadata:
    requests: list[RequestSlots]
    page_size: int
    #: decode rows batched together: rows (Bd,), slots (Bd, Smax), key valid mask (Bd, Smax)
    decode_ids: list[int] = field(default_factory=list)
    decode_rows: torch.Tensor | None = None
    decode_slots: torch.Tensor | None = None
    decode_valid: torch.Tensor | None = None
    decode_qpos: torch.Tensor | None = None
    decode_only: bool = False  #: every row is a decode row, in batch order
    _masks: dict[Any, torch.Tensor] = field(default_factory=dict)


#: decode keys are padded to a multiple of this on CUDA, so SDPA sees few distinct shapes
#: (cuDNN plans each new shape on the host: ~2 ms per layer when the length grows every step)
KEY_BUCKET = 256


def causal_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """(Q, K) bool: key ``j`` visible from position ``p`` iff ``j <= p`` and ``j > p - window``."""
    allowed = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        allowed &= k_pos[None, :] > q_pos[:, None] - window
    return allowed


class TorchAttentionBackend(AttentionBackend):
    capabilities = TORCH_ATTENTION.capabilities

    def __init__(self, options: Any = None, build: Any = None) -> None:
        self.options = options
        self.build = build
        self.deterministic = bool(getattr(build, "deterministic", False))

    # -- per step -----------------------------------------------------------------------------

    def prepare_metadata(self, batch: ForwardBatch) -> TorchAttentionMetadata:
        page_table = batch.page_table
        device = page_table.device
        page_size = self.page_size_of(batch)
        offsets = torch.arange(page_size, device=device)
        # (B, max_pages * page_size): flat slot of every position each row's pages cover
        all_slots = (page_table[:, :, None] * page_size + offsets).reshape(page_table.shape[0], -1)
        requests, decode_ids = [], []
        q_start = 0
        for i, (prefix, extend) in enumerate(zip(batch.prefix_lens_cpu, batch.extend_lens_cpu, strict=True)):
            seq = prefix + extend
            assert seq <= all_slots.shape[1], (
                f"request {i}: {seq} tokens but page_table row covers {all_slots.shape[1]}")
            requests.append(RequestSlots(q_start, prefix, seq, all_slots[i, :seq]))
            if extend == 1:
                decode_ids.append(i)
            q_start += extend
        meta = TorchAttentionMetadata(requests, page_size)
        if decode_ids and not self.deterministic:
            reqs = [requests[i] for i in decode_ids]
            max_len = max(r.seq_len for r in reqs)
            if device.type == "cuda":  # NOTE: few distinct key lengths: SDPA plans once per shape
                max_len = -(-max_len // KEY_BUCKET) * KEY_BUCKET
            max_len = min(max_len, all_slots.shape[1])
            lens = to_device([r.seq_len for r in reqs], torch.int64, device)
            valid = torch.arange(max_len, device=device)[None, :] < lens[:, None]
            slots = all_slots[:, :max_len]
            if len(decode_ids) < len(requests):
                slots = slots.index_select(0, to_device(decode_ids, torch.int64, device))
            # NOTE: padding repeats the request's own first slot (written, finite) and is masked;
            # page 0 could hold NaN, and 0 * NaN = NaN even under a zero attention weight
            meta.decode_slots = torch.where(valid, slots, slots[:, :1])
            meta.decode_ids = decode_ids
            meta.decode_only = len(decode_ids) == len(requests)
            meta.decode_rows = to_device([r.q_start for r in reqs], torch.int64, device)
            meta.decode_valid = valid
            meta.decode_qpos = lens - 1
        return meta

    def page_size_of(self, batch: ForwardBatch) -> int:
        if self.build is not None and getattr(self.build, "page_size", None):
            return int(self.build.page_size)
        raise ValueError("TorchAttentionBackend needs build.page_size (BuildContext.page_size)")

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
        if not kv_saved:  # else the layer stored them (capabilities.kv_written_by_layer)
            write_kv(kv, layer.kv_layer_id, batch.out_loc, k, v)
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        meta = batch.attn_metadata
        if meta is None:
            meta = batch.attn_metadata = self.prepare_metadata(batch)
        assert meta.page_size == kv.page_size, (
            f"metadata built for page_size {meta.page_size}, KV pool has {kv.page_size}")
        cap = layer.logit_softcap
        if meta.decode_only and not cap:  # the common decode step: one batched SDPA, nothing to scatter
            return self._decode_batch(q, k_cache, v_cache, layer, meta, None)
        out = torch.empty_like(q)
        window = layer.sliding_window
        if self.deterministic:
            for r in meta.requests:
                if r.extend_len:
                    out[r.q_start : r.q_start + r.extend_len] = fixed_split_attention(
                        q[r.q_start : r.q_start + r.extend_len], k_cache.index_select(0, r.kv_slots),
                        v_cache.index_select(0, r.kv_slots),
                        r.prefix_len, layer.scale, window, softcap=cap,
                    ).to(q.dtype)
            return out
        if cap:
            for r in meta.requests:
                if r.extend_len:
                    rows = slice(r.q_start, r.q_start + r.extend_len)
                    out[rows] = softcap_attention(
                        q[rows], k_cache.index_select(0, r.kv_slots),
                        v_cache.index_select(0, r.kv_slots), r.prefix_len, layer).to(q.dtype)
            return out
        skip = set(meta.decode_ids)
        if skip:
            self._decode_batch(q, k_cache, v_cache, layer, meta, out)
        for i, r in enumerate(meta.requests):
            if i in skip or not r.extend_len:
                continue
            key = (i, window)
            if key not in meta._masks:
                q_pos = torch.arange(r.prefix_len, r.seq_len, device=q.device)
                meta._masks[key] = causal_mask(q_pos, torch.arange(r.seq_len, device=q.device), window)
            rows = slice(r.q_start, r.q_start + r.extend_len)
            ki = _as(k_cache.index_select(0, r.kv_slots), q.dtype)
            vi = _as(v_cache.index_select(0, r.kv_slots), q.dtype)
            o = F.scaled_dot_product_attention(
                q[rows].transpose(0, 1)[None], ki.transpose(0, 1)[None], vi.transpose(0, 1)[None],
                attn_mask=meta._masks[key], scale=layer.scale, enable_gqa=True,
            )
            out[rows] = o[0].transpose(0, 1)
        return out

    def _decode_batch(self, q, k_cache, v_cache, layer: AttentionLayer, meta, out) -> None:
        key = ("decode", layer.sliding_window, q.dtype)
        if key not in meta._masks:  # once per step: an additive mask SDPA uses as it is
            k_pos = torch.arange(meta.decode_slots.shape[1], device=q.device)
            allowed = meta.decode_valid.clone()
            if layer.sliding_window is not None:
                allowed &= k_pos[None, :] > meta.decode_qpos[:, None] - layer.sliding_window
            bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
            meta._masks[key] = bias.masked_fill_(~allowed, float("-inf"))[:, None, None, :]
        ki = _as(gather_rows(k_cache, meta.decode_slots), q.dtype)
        vi = _as(gather_rows(v_cache, meta.decode_slots), q.dtype)
        qi = q if meta.decode_only else q.index_select(0, meta.decode_rows)
        o = F.scaled_dot_product_attention(
            qi[:, :, None, :], ki.transpose(1, 2), vi.transpose(1, 2),  # (Bd, H, 1, D)
            attn_mask=meta._masks[key], scale=layer.scale, enable_gqa=True,
        )
        if meta.decode_only:
            return o[:, :, 0, :]
        out.index_copy_(0, meta.decode_rows, o[:, :, 0, :])
        return None


def softcap_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_len: int,
                      layer: AttentionLayer) -> torch.Tensor:
    """One request's causal attention with ``layer.logit_softcap``, float32 out.

    :param q: (E, H, D) queries at positions ``prefix_len .. prefix_len + E - 1``.
    :param k: (S, Hkv, D) keys at positions ``0 .. S - 1``; ``v`` likewise.
    """
    rep = layer.num_heads // layer.num_kv_heads
    qf = q.float().transpose(0, 1)  # (H, E, D)
    kf = k.float().repeat_interleave(rep, dim=1).transpose(0, 1)  # (H, S, D)
    vf = v.float().repeat_interleave(rep, dim=1).transpose(0, 1)
    scores = torch.matmul(qf, kf.transpose(1, 2)) * layer.scale
    cap = layer.logit_softcap
    scores = torch.tanh(scores / cap) * cap
    q_pos = torch.arange(prefix_len, prefix_len + q.shape[0], device=q.device)
    allowed = causal_mask(q_pos, torch.arange(k.shape[0], device=q.device), layer.sliding_window)
    probs = torch.softmax(scores.masked_fill(~allowed[None], float("-inf")), dim=-1)
    return torch.matmul(probs, vf).transpose(0, 1)


def gather_rows(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``pool[index]`` for a 2-D ``index`` via ``index_select``.

    NOTE: advanced indexing on CPU takes a threaded path that costs milliseconds on a loaded
    2-core machine; ``index_select`` costs microseconds. The hot paths here all use it.
    """
    return pool.index_select(0, index.reshape(-1)).view(*index.shape, *pool.shape[1:])


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)`` without the dispatch when it is already that dtype (a hot path)."""
    return x if x.dtype == dtype else x.to(dtype)
