"""``template-sdpa``: for each request, gather its keys through the page table and run
``torch.nn.functional.scaled_dot_product_attention`` with a causal (and sliding-window) mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from hinge.contracts import AttentionBackend
from hinge_template.plugin import TEMPLATE_SDPA, TemplateOptions


@dataclass
class RequestView:
    rows: slice  #: this request's query rows in the step
    prefix_len: int
    kv_slots: torch.Tensor  #: (seq_len,) flat KV slots of keys 0..seq_len-1


class TemplateSDPABackend(AttentionBackend):
    capabilities = TEMPLATE_SDPA.capabilities

    def __init__(self, options: TemplateOptions | None, build: Any) -> None:
        self.options = options or TemplateOptions()
        self.page_size = build.page_size

    def prepare_metadata(self, batch) -> list[RequestView]:
        ps = self.page_size
        offsets = torch.arange(ps, device=batch.page_table.device)
        views, start = [], 0
        for i, (prefix, extend) in enumerate(zip(batch.prefix_lens_cpu, batch.extend_lens_cpu, strict=True)):
            seq = prefix + extend
            pages = batch.page_table[i, : -(-seq // ps)]
            slots = (pages[:, None] * ps + offsets[None, :]).reshape(-1)[:seq]
            views.append(RequestView(slice(start, start + extend), prefix, slots))
            start += extend
        return views

    def forward(self, q, k, v, layer, kv, batch):
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        k_cache[batch.out_loc] = k.to(k_cache.dtype)
        v_cache[batch.out_loc] = v.to(v_cache.dtype)
        compute = torch.float32 if self.options.upcast else q.dtype
        out = torch.empty_like(q)
        for view in batch.attn_metadata:
            n = view.rows.stop - view.rows.start
            if n == 0:
                continue
            seq = len(view.kv_slots)
            q_pos = torch.arange(view.prefix_len, seq, device=q.device)[:, None]
            k_pos = torch.arange(seq, device=q.device)[None, :]
            mask = k_pos <= q_pos
            if layer.sliding_window is not None:
                mask &= k_pos > q_pos - layer.sliding_window
            qi = q[view.rows].to(compute).transpose(0, 1)  # (H, n, D)
            ki = k_cache[view.kv_slots].to(compute).transpose(0, 1)  # (Hkv, S, D)
            vi = v_cache[view.kv_slots].to(compute).transpose(0, 1)
            o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=layer.scale,
                                               enable_gqa=True)
            out[view.rows] = o.transpose(0, 1).to(q.dtype)
        return out
