"""A tiny graph-capable attention backend for tests: proves the graph runner and the kit's graph
protocol without any other engineer's kernels.

Every query row gathers a fixed number of keys (the page-table width x page size: every position
a request may hold) from its request's page row and masks them by position, so a step is the same
handful of fixed-shape device ops whatever its lengths. Its metadata: per token its request row
and absolute position, and its own copy of the page rows (as flashinfer keeps its own KV page
indices): fresh tensors per eager step, static buffers refilled by ``prepare_for_replay`` under
graphs. Slow and memory-hungry (T x keys x heads x dim): tiny models and short contexts only.

``StaleGatherAttention`` is the same backend with the classic bug: ``prepare_for_replay`` refills
the live rows only, so padded rows keep the pages an earlier, larger step left (the kit must catch
it: those pages now hold another request's keys, or NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hinge import hookimpl
from hinge.batching import pad_extend_lens
from hinge.contracts import AttentionBackend
from hinge.plugins import AttentionBackendSpec, AttentionCapabilities

NAME = "static_gather"
CAPABILITIES = AttentionCapabilities(prefill_graph=True, decode_graph=True, sliding_window=True,
                                     graph_note="")


@dataclass
class GatherMetadata:
    token_row: torch.Tensor  #: (T,) int64 row of ``pages`` each token belongs to
    token_pos: torch.Tensor  #: (T,) int64 absolute position of each token
    pages: torch.Tensor  #: (R, W) int64 page ids per request row (the backend's own copy)


def token_layout(extend_lens: list[int], prefix_lens: list[int]) -> tuple[list[int], list[int]]:
    rows, pos = [], []
    for i, (e, p) in enumerate(zip(extend_lens, prefix_lens, strict=True)):
        rows += [i] * e
        pos += range(p, p + e)
    return rows, pos


class StaticGatherAttention(AttentionBackend):
    capabilities = CAPABILITIES

    def __init__(self, options: Any = None, build: Any = None) -> None:
        self.build = build
        self._rows: torch.Tensor | None = None
        self._pos: torch.Tensor | None = None
        self._pages: torch.Tensor | None = None

    # -- eager ------------------------------------------------------------------------------------

    def prepare_metadata(self, batch) -> GatherMetadata:
        rows, pos = token_layout(batch.extend_lens_cpu, batch.prefix_lens_cpu)
        device = batch.input_ids.device
        return GatherMetadata(torch.tensor(rows, device=device), torch.tensor(pos, device=device),
                              batch.page_table.clone())

    # -- graphs -----------------------------------------------------------------------------------

    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int, max_pages: int) -> None:
        device = self.build.device if self.build is not None else "cpu"
        self._rows = torch.zeros(max_num_tokens, dtype=torch.int64, device=device)
        self._pos = torch.zeros(max_num_tokens, dtype=torch.int64, device=device)
        self._pages = torch.zeros(max_batch_size, max_pages, dtype=torch.int64, device=device)

    def prepare_for_capture(self, batch) -> None:
        n, r = batch.num_tokens, batch.batch_size
        batch.attn_metadata = GatherMetadata(self._rows[:n], self._pos[:n], self._pages[:r])
        self.prepare_for_replay(batch, r)

    def prepare_for_replay(self, batch, padded_batch_size: int) -> None:
        self._fill(batch.extend_lens_cpu, batch.prefix_lens_cpu, batch.num_tokens, padded_batch_size)
        self._pages[:padded_batch_size].copy_(batch.page_table)  # padded rows: the runner's zeros

    def _fill(self, extend_lens, prefix_lens, num_tokens: int, num_rows: int) -> None:
        ext = pad_extend_lens(extend_lens, num_tokens, num_rows)
        pre = list(prefix_lens) + [0] * (num_rows - len(prefix_lens))
        rows, pos = token_layout(ext, pre)
        self._rows[:num_tokens].copy_(torch.tensor(rows))
        self._pos[:num_tokens].copy_(torch.tensor(pos))

    # -- per layer --------------------------------------------------------------------------------

    def forward(self, q, k, v, layer, kv, batch):
        k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
        k_cache.index_copy_(0, batch.out_loc, k.to(k_cache.dtype))
        v_cache.index_copy_(0, batch.out_loc, v.to(v_cache.dtype))
        meta = batch.attn_metadata
        ps = kv.page_size
        keys = meta.pages.shape[1] * ps
        k_pos = torch.arange(keys, device=q.device)
        pages = meta.pages.index_select(0, meta.token_row)  # (T, W)
        slots = pages.repeat_interleave(ps, dim=1) * ps + k_pos % ps  # (T, keys)
        visible = k_pos[None, :] <= meta.token_pos[:, None]
        if layer.sliding_window is not None:
            visible &= k_pos[None, :] > meta.token_pos[:, None] - layer.sliding_window
        rep = layer.num_heads // layer.num_kv_heads
        t = q.shape[0]
        kg = k_cache.index_select(0, slots.reshape(-1)).view(t, keys, -1, layer.head_dim).float()
        vg = v_cache.index_select(0, slots.reshape(-1)).view(t, keys, -1, layer.head_dim).float()
        # NOTE: unread slots may hold NaN (page 0, free pages): zero them, 0 * NaN is NaN
        kg = torch.where(visible[:, :, None, None], kg, 0.0).repeat_interleave(rep, dim=2)
        vg = torch.where(visible[:, :, None, None], vg, 0.0).repeat_interleave(rep, dim=2)
        scores = torch.einsum("thd,tkhd->thk", q.float(), kg) * layer.scale
        scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
        return torch.einsum("thk,tkhd->thd", scores.softmax(-1), vg).to(q.dtype)


class StaleGatherAttention(StaticGatherAttention):
    """The bug invariant 4 forbids: padded rows are not reset on replay."""

    def prepare_for_replay(self, batch, padded_batch_size: int) -> None:
        b, t = batch.batch_size, sum(batch.extend_lens_cpu)
        rows, pos = token_layout(batch.extend_lens_cpu, batch.prefix_lens_cpu)
        self._rows[:t].copy_(torch.tensor(rows, dtype=torch.int64))
        self._pos[:t].copy_(torch.tensor(pos, dtype=torch.int64))
        self._pages[:b].copy_(batch.page_table[:b])


def _factory(cls):
    return lambda options, build: cls(options, build)


SPEC = AttentionBackendSpec(name=NAME, factory=_factory(StaticGatherAttention),
                            capabilities=CAPABILITIES,
                            description="test backend: fixed-capacity key gathers, graph capable")
STALE_SPEC = AttentionBackendSpec(name="stale_gather", factory=_factory(StaleGatherAttention),
                                  capabilities=CAPABILITIES, description="test backend with stale pads")


class GraphBackendPlugin:
    """An in-process plugin registering both test backends."""

    @hookimpl
    def register_attention_backends(self, register):
        register(SPEC)
        register(STALE_SPEC)
