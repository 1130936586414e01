"""CUDA-graph checks for components that claim a graph phase (run on a GPU only).

The protocol, as ``hinge.contracts.AttentionBackend`` states it: ``init_graph_buffers`` once;
before capture and before every replay ``prepare_for_replay(batch, padded_batch_size)`` refills
the static metadata for the live rows and clears the padded ones (invariant 4). The graph reads
the batch's tensors by address, so a new step's values are copied into the captured tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from hinge.testing.base import TOLERANCE
from hinge.testing.batches import BatchCase, build_batch
from hinge.testing.reference import reference_attention


def _copy_into(dst: BatchCase, src: BatchCase) -> None:
    for name in ("input_ids", "positions", "extend_lens", "prefix_lens", "page_table", "out_loc",
                 "logits_indices"):
        getattr(dst.batch, name).copy_(getattr(src.batch, name))
    dst.batch.extend_lens_cpu[:] = src.batch.extend_lens_cpu
    dst.batch.prefix_lens_cpu[:] = src.batch.prefix_lens_cpu
    for t_dst, t_src in ((dst.q, src.q), (dst.k, src.k), (dst.v, src.v)):
        t_dst.copy_(t_src)
    for caches_dst, caches_src in ((dst.kv.k, src.kv.k), (dst.kv.v, src.kv.v)):
        for c_dst, c_src in zip(caches_dst, caches_src, strict=True):
            c_dst.copy_(c_src)


def check_graph_replay(backend: Any, phase: str, layer: Any, page_size: int, dtype: torch.dtype,
                       batch_size: int = 4) -> None:
    """Capture one step, then replay it for new requests: equal to the oracle each time."""
    per_req = 1 if phase == "decode" else 8
    cases = [
        build_batch([17 + 5 * s + i for i in range(batch_size)], [per_req] * batch_size, layer=layer,
                    page_size=page_size, dtype=dtype, device="cuda", seeds=range(s, s + batch_size),
                    phase=phase, spare_pages=8)
        for s in range(3)
    ]
    static = cases[0]
    backend.init_graph_buffers(batch_size, batch_size * per_req)
    backend.prepare_for_replay(static.batch, batch_size)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the graph
        backend.forward(static.q, static.k, static.v, layer, static.kv, static.batch)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = backend.forward(static.q, static.k, static.v, layer, static.kv, static.batch)
    for new in cases[1:]:
        _copy_into(static, new)
        expected = reference_attention(static.q, static.kv, layer, static.batch, k=static.k, v=static.v)
        backend.prepare_for_replay(static.batch, batch_size)
        graph.replay()
        torch.cuda.synchronize()
        err = float((out.double().cpu() - expected).abs().max())
        assert err <= TOLERANCE[dtype], f"{phase} graph replay differs from the oracle by {err:.3g}"
