"""Attention backend ``torch``: the reference paged attention in plain torch (CPU and CUDA).

Per step ``prepare_metadata`` turns the page table into flat KV slots per request (host-side
work once); every layer then writes its new k/v at ``batch.out_loc`` and attends:

- default path: decode requests (one new token) in one padded SDPA call, each prefill/extend
  request in its own causal SDPA call (GQA via ``enable_gqa``; sliding window as a mask);
- deterministic path (``build.deterministic``): float32 online softmax over a fixed KV split of
  ``KV_BLOCK`` keys at absolute positions, queries in fixed blocks of ``Q_BLOCK`` rows, KV blocks
  visited in order. A query's bits then depend only on its own position and keys: the same alone,
  in any batch, and for any prefill chunking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from hinge.builtin.plugin import TORCH_ATTENTION
from hinge.contracts import AttentionBackend, AttentionLayer

if TYPE_CHECKING:
    from hinge.engine.batch import ForwardBatch
    from hinge.engine.kv_pool import KVCache

KV_BLOCK = 64
Q_BLOCK = 16


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
    _masks: dict[Any, torch.Tensor] = field(default_factory=dict)


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
        if len(decode_ids) > 1 and not self.deterministic:
            reqs = [requests[i] for i in decode_ids]
            max_len = max(r.seq_len for r in reqs)
            lens = torch.tensor([r.seq_len for r in reqs], device=device)
            valid = torch.arange(max_len, device=device)[None, :] < lens[:, None]
            slots = all_slots.index_select(0, torch.tensor(decode_ids, device=device))[:, :max_len]
            # NOTE: padding repeats the request's own first slot (written, finite) and is masked;
            # page 0 could hold NaN, and 0 * NaN = NaN even under a zero attention weight
            meta.decode_slots = torch.where(valid, slots, slots[:, :1])
            meta.decode_ids = decode_ids
            meta.decode_rows = torch.tensor([r.q_start for r in reqs], device=device)
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
    ) -> torch.Tensor:
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        k_cache.index_copy_(0, batch.out_loc, k.to(k_cache.dtype))
        v_cache.index_copy_(0, batch.out_loc, v.to(v_cache.dtype))
        meta = batch.attn_metadata
        if meta is None:
            meta = batch.attn_metadata = self.prepare_metadata(batch)
        assert meta.page_size == kv.page_size, (
            f"metadata built for page_size {meta.page_size}, KV pool has {kv.page_size}")
        out = torch.empty_like(q)
        window = layer.sliding_window
        if self.deterministic:
            for r in meta.requests:
                if r.extend_len:
                    out[r.q_start : r.q_start + r.extend_len] = fixed_split_attention(
                        q[r.q_start : r.q_start + r.extend_len], k_cache.index_select(0, r.kv_slots),
                        v_cache.index_select(0, r.kv_slots),
                        r.prefix_len, layer.scale, window,
                    ).to(q.dtype)
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
            ki = k_cache.index_select(0, r.kv_slots).to(q.dtype)
            vi = v_cache.index_select(0, r.kv_slots).to(q.dtype)
            o = F.scaled_dot_product_attention(
                q[rows].transpose(0, 1)[None], ki.transpose(0, 1)[None], vi.transpose(0, 1)[None],
                attn_mask=meta._masks[key], scale=layer.scale, enable_gqa=True,
            )
            out[rows] = o[0].transpose(0, 1)
        return out

    def _decode_batch(self, q, k_cache, v_cache, layer: AttentionLayer, meta, out) -> None:
        key = ("decode", layer.sliding_window)
        if key not in meta._masks:
            k_pos = torch.arange(meta.decode_slots.shape[1], device=q.device)
            mask = meta.decode_valid.clone()
            if layer.sliding_window is not None:
                mask &= k_pos[None, :] > meta.decode_qpos[:, None] - layer.sliding_window
            meta._masks[key] = mask
        mask = meta._masks[key]
        ki = gather_rows(k_cache, meta.decode_slots).to(q.dtype)
        vi = gather_rows(v_cache, meta.decode_slots).to(q.dtype)
        qi = q.index_select(0, meta.decode_rows)[:, :, None, :]  # (Bd, H, 1, D)
        o = F.scaled_dot_product_attention(
            qi, ki.transpose(1, 2), vi.transpose(1, 2),
            attn_mask=mask[:, None, None, :], scale=layer.scale, enable_gqa=True,
        )
        out.index_copy_(0, meta.decode_rows, o[:, :, 0, :])


def gather_rows(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``pool[index]`` for a 2-D ``index`` via ``index_select``.

    NOTE: advanced indexing on CPU takes a threaded path that costs milliseconds on a loaded
    2-core machine; ``index_select`` costs microseconds. The hot paths here all use it.
    """
    return pool.index_select(0, index.reshape(-1)).view(*index.shape, *pool.shape[1:])


def fixed_split_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix_len: int,
    scale: float,
    window: int | None,
) -> torch.Tensor:
    """Batch-invariant causal attention of one request, float32 out.

    :param q: (E, H, D) queries at positions ``prefix_len .. prefix_len+E-1``.
    :param k: (S, Hkv, D) keys at positions ``0..S-1``; ``v`` likewise.

    Rows are (token, head-in-group) pairs per KV head, in blocks of ``Q_BLOCK`` (padded rows see
    no key); keys are visited in blocks of ``KV_BLOCK`` at absolute positions with an online
    softmax. A block entirely masked for a row leaves that row's state bit-identical, so the rows
    sharing its block never change its result.
    """
    e, h, d = q.shape
    s, g = k.shape[0], k.shape[1]
    rep = h // g
    device = q.device
    rows = e * rep
    padded_rows = -(-rows // Q_BLOCK) * Q_BLOCK
    padded_keys = -(-s // KV_BLOCK) * KV_BLOCK
    qf = q.float().reshape(e, g, rep, d).permute(1, 0, 2, 3).reshape(g, rows, d)
    qf = torch.cat([qf, qf.new_zeros(g, padded_rows - rows, d)], dim=1)
    kf = torch.cat([k.float(), k.new_zeros(padded_keys - s, g, d, dtype=torch.float32)]).transpose(0, 1)
    vf = torch.cat([v.float(), v.new_zeros(padded_keys - s, g, d, dtype=torch.float32)]).transpose(0, 1)
    row_pos = torch.full((padded_rows,), -1, dtype=torch.int64, device=device)
    row_pos[:rows] = torch.arange(prefix_len, prefix_len + e, device=device).repeat_interleave(rep)
    block_k_pos = torch.arange(KV_BLOCK, device=device)
    out = torch.empty(g, padded_rows, d, dtype=torch.float32, device=device)
    neg_inf = float("-inf")
    for start in range(0, padded_rows, Q_BLOCK):
        qb = qf[:, start : start + Q_BLOCK].contiguous()
        pos = row_pos[start : start + Q_BLOCK]
        first_tok, last_tok = start // rep, min(start + Q_BLOCK - 1, rows - 1) // rep
        hi_pos, lo_pos = prefix_len + last_tok, prefix_len + first_tok
        first_blk = max(0, lo_pos - window + 1) // KV_BLOCK if window is not None else 0
        m = torch.full((g, Q_BLOCK, 1), neg_inf, device=device)
        l_sum = torch.zeros(g, Q_BLOCK, 1, device=device)
        acc = torch.zeros(g, Q_BLOCK, d, device=device)
        for blk in range(first_blk, hi_pos // KV_BLOCK + 1):
            k0 = blk * KV_BLOCK
            kb = kf[:, k0 : k0 + KV_BLOCK].contiguous()
            vb = vf[:, k0 : k0 + KV_BLOCK].contiguous()
            allowed = causal_mask(pos, block_k_pos + k0, window)
            scores = _bmm(qb, kb.transpose(1, 2)) * scale
            scores = scores.masked_fill(~allowed[None], neg_inf)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == neg_inf, 0.0, m_new)
            p = torch.exp(scores - m_safe)
            alpha = torch.exp(m - m_safe)
            l_sum = l_sum * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + _bmm(p, vb)
            m = m_new
        out[:, start : start + Q_BLOCK] = acc / l_sum
    out = out[:, :rows].reshape(g, e, rep, d).permute(1, 0, 2, 3).reshape(e, h, d)
    return out


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm`` as one ``mm`` per KV head: small CPU ``bmm`` calls go through a threaded path
    that costs ~1 ms each on a loaded 2-core machine, ``mm`` of these shapes a few microseconds."""
    if a.is_cuda:
        return torch.bmm(a, b)
    return torch.stack([torch.mm(x, y) for x, y in zip(a, b, strict=True)])
