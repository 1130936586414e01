"""CUDA-graph protocol checks for attention backends that claim a graph phase.

The protocol (``hinge.contracts.AttentionBackend``, "CUDA graphs"): ``init_graph_buffers`` once;
``prepare_for_capture`` once per shape; before every replay the runner writes the live step into
the shape's static tensors, padded (``ForwardBatchBuilder.build(..., into=static)``), and the
backend's ``prepare_for_replay`` refills its static metadata for the live rows and clears the
padded ones (invariant 4).

``check_graph_replay`` captures one shape of 4 requests and replays steps of 4, 3, 1 and 2 live
requests over pages shuffled between steps (a request's pages belong to another request, or to
nobody, in the next step). Before each replay page 0 holds zeros and every page no live request
holds NaN, so:

- live rows must equal the float64 oracle (a stale or misplaced live row differs);
- padded rows must be finite: a padded row that reads anything but page 0 (a stale row of the
  earlier, larger step) reads NaN;
- no KV slot outside the live rows' ``out_loc`` and page 0 may change.

On CUDA the step is a real ``torch.cuda.CUDAGraph``; on CPU (a backend that runs there) the
"graph" runs the captured call again over the same static tensors, which checks the protocol
and the padding without a GPU.
"""

from __future__ import annotations

from typing import Any

import torch

from hinge.batching import ForwardBatchBuilder, GraphShape, StepSeq
from hinge.forward import KVCache
from hinge.testing.base import TOLERANCE
from hinge.testing.batches import fill_page_tails
from hinge.testing.reference import reference_attention

#: live (prefix_lens, extend_lens) replayed into a captured shape of 4 requests, per phase
DECODE_STEPS = [([9, 40, 17, 63], [1] * 4), ([33, 2, 70], [1] * 3), ([5], [1]), ([16, 47], [1, 1])]
PREFILL_STEPS = [([0, 0, 0, 0], [8, 8, 8, 8]), ([5, 0, 31], [7, 3, 10]), ([0], [1]),
                 ([12, 3, 0, 7], [1, 1, 9, 2])]
CAPTURE_REQUESTS = 4
PREFILL_TOKENS = 32


class _Rerun:
    """A CUDA graph's contract on CPU: replay = the captured call again, same tensors."""

    def __init__(self, fn):
        self.fn, self.out = fn, fn()

    def replay(self) -> None:
        self.out.copy_(self.fn())


def _capture(fn, device: torch.device):
    if device.type != "cuda":
        graph = _Rerun(fn)
        return graph, graph.out
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the graph
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def check_graph_replay(backend: Any, phase: str, layer: Any, page_size: int, dtype: torch.dtype,
                       device: str | torch.device = "cuda", *, num_pages: int = 64,
                       steps: list | None = None, page_tail_fill: float | None = None) -> None:
    """Capture a ``phase`` shape of 4 requests, then replay ``steps`` (default: 4, 3, 1, 2 live
    requests); each replay is checked as the module docstring says. ``page_tail_fill``: the
    value past each live request's length in its last page (``hinge.testing.batches``)."""
    device = torch.device(device)
    decode = phase == "decode"
    shape = GraphShape.decode(CAPTURE_REQUESTS) if decode else \
        GraphShape.prefill(PREFILL_TOKENS, CAPTURE_REQUESTS)
    steps = steps if steps is not None else (DECODE_STEPS if decode else PREFILL_STEPS)
    max_pages = max(-(-(p + e) // page_size) for pre, ext in steps for p, e in zip(pre, ext, strict=True))
    g, d, h = layer.num_kv_heads, layer.head_dim, layer.num_heads
    cache = [torch.zeros(num_pages * page_size, g, d, dtype=dtype, device=device)
             for _ in range(layer.kv_layer_id + 1)]
    kv = KVCache(cache, [c.clone() for c in cache], page_size)
    builder = ForwardBatchBuilder(page_size=page_size, max_rows=CAPTURE_REQUESTS + 2,
                                  max_pages=max_pages, device=device)
    backend.init_graph_buffers(shape.num_requests, shape.num_tokens, max_pages)
    static = builder.static_batch(shape)
    backend.prepare_for_capture(static.batch)
    n = shape.num_tokens
    q, k, v = (torch.zeros(n, heads, d, dtype=dtype, device=device) for heads in (h, g, g))
    graph, out = _capture(lambda: backend.forward(q, k, v, layer, kv, static.batch), device)
    for i, (prefix_lens, extend_lens) in enumerate(steps):
        batch, live_loc, t = _load_step(builder, static, kv, layer, q, k, v, prefix_lens, extend_lens,
                                        seed=i, phase=phase, page_tail_fill=page_tail_fill)
        expected = reference_attention(q, kv, layer, batch, k=k, v=v)
        k_before, v_before = kv.k[layer.kv_layer_id].clone(), kv.v[layer.kv_layer_id].clone()
        backend.prepare_for_replay(batch, shape.num_requests)
        graph.replay()
        if device.type == "cuda":
            torch.cuda.synchronize()
        where = f"{phase} replay {i} ({len(extend_lens)} live of {CAPTURE_REQUESTS} requests)"
        err = float((out[:t].double().cpu() - expected[:t]).abs().max())
        assert err <= TOLERANCE[dtype], f"{where}: live rows differ from the oracle by {err:.3g}"
        assert bool(torch.isfinite(out[t:]).all()), (
            f"{where}: a padded row read a page other than page 0 (NaN): stale metadata of an "
            "earlier, larger step survived prepare_for_replay (invariant 4)")
        _check_writes(kv, layer, k_before, v_before, live_loc, page_size, where)


def _load_step(builder, static, kv, layer, q, k, v, prefix_lens, extend_lens, *, seed, phase,
               page_tail_fill=None):
    """Write one live step into the static tensors and the KV pool; returns (batch, live out_loc, T)."""
    ps = kv.page_size
    num_pages = kv.k[0].shape[0] // ps
    order = (torch.randperm(num_pages - 1, generator=torch.Generator().manual_seed(seed)) + 1).tolist()
    gen = torch.Generator().manual_seed(100 + seed)
    k_cache, v_cache = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
    k_cache.fill_(float("nan"))
    v_cache.fill_(float("nan"))
    k_cache[:ps] = 0  # NOTE: page 0 is finite: only a padded row that reads elsewhere sees NaN
    v_cache[:ps] = 0
    seqs, rows, t = [], [], 0
    for i, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        seq = prefix + extend
        pages = [order.pop() for _ in range(-(-seq // ps))]
        slots = torch.tensor([pages[j // ps] * ps + j % ps for j in range(seq)])
        shape_k = (seq, layer.num_kv_heads, layer.head_dim)
        k_all, v_all = torch.randn(shape_k, generator=gen), torch.randn(shape_k, generator=gen)
        q_new = torch.randn(extend, layer.num_heads, layer.head_dim, generator=gen)
        k_cache[slots[:prefix].to(k_cache.device)] = k_all[:prefix].to(k_cache)
        v_cache[slots[:prefix].to(v_cache.device)] = v_all[:prefix].to(v_cache)
        if page_tail_fill is not None:
            fill_page_tails(k_cache, v_cache, pages, seq, ps, page_tail_fill)
        q[t:t + extend], k[t:t + extend], v[t:t + extend] = q_new, k_all[prefix:], v_all[prefix:]
        rows.extend(slots[prefix:].tolist())
        seqs.append(StepSeq(row=i + 1, prefix_len=prefix, extend_len=extend, pages=pages,
                            new_tokens=[0] * extend, sample=True))
        t += extend
    # padded rows: finite data; their k/v land in page 0 (out_loc), read back by themselves only
    q[t:], k[t:], v[t:] = (torch.randn(x[t:].shape, generator=gen).to(x) for x in (q, k, v))
    batch = builder.build(seqs, phase=phase, into=static)
    return batch, rows, t


def _check_writes(kv, layer, k_before, v_before, live_loc, page_size, where) -> None:
    """Only the live rows' ``out_loc`` slots and page 0 (padded rows' writes) may change."""
    k_after, v_after = kv.k[layer.kv_layer_id], kv.v[layer.kv_layer_id]
    keep = torch.ones(k_after.shape[0], dtype=torch.bool, device=k_after.device)
    keep[:page_size] = False
    keep[torch.tensor(live_loc, dtype=torch.int64, device=keep.device)] = False
    for after, before in ((k_after, k_before), (v_after, v_before)):
        assert torch.equal(after[keep].nan_to_num(nan=7.0), before[keep].nan_to_num(nan=7.0)), (
            f"{where}: the backend wrote KV slots outside the live rows' out_loc and page 0")
