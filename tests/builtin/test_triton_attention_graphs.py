"""The ``triton`` backend's graph protocol: the static metadata buffer (refill, padding, cleared
rows), and replay == eager bit for bit at every live size (CPU: Triton's interpreter with the
captured call rerun; CUDA: a real ``torch.cuda.CUDAGraph``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from triton_cases import make_backend, make_layer, needs_cuda  # noqa: E402

from hinge.batching import ForwardBatchBuilder, GraphShape, StepSeq  # noqa: E402
from hinge.forward import KVCache  # noqa: E402


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _capture(fn, device: torch.device):
    """(replay, out): a CUDA graph of ``fn``, or on CPU ``fn`` rerun over the same tensors."""
    if device.type != "cuda":
        out = fn()
        return (lambda: out.copy_(fn())), out
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # compile and warm up outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def replay_against_eager(shape: GraphShape, steps, *, device="cpu", dtype=torch.float32,
                         layer=None, page_size=16, **options) -> None:
    """Capture ``shape`` once, replay every step of ``steps`` (lists of (prefix, extend)): the
    live rows equal an eager run of the same step bit for bit, the padded rows are zeros."""
    device = torch.device(device)
    layer = layer or make_layer()
    gen = torch.Generator().manual_seed(0)
    max_pages = max(-(-(p + e) // page_size) for step in steps for p, e in step)
    num_pages = 2 + shape.num_requests * max_pages
    pool = [torch.randn(num_pages * page_size, layer.num_kv_heads, layer.head_dim, generator=gen)
            .to(device, dtype) for _ in range(2)]
    for cache in pool:
        cache[:page_size] = float("nan")  # page 0: garbage no row may read (padded rows neither)
    kv = KVCache([pool[0]], [pool[1]], page_size)
    graphed = make_backend(device.type, dtype, page_size, **options)
    eager = make_backend(device.type, dtype, page_size, **options)
    builder = ForwardBatchBuilder(page_size=page_size, max_rows=shape.num_requests + 1,
                                  max_pages=max_pages, device=device)
    graphed.init_graph_buffers(shape.num_requests, shape.num_tokens, max_pages)
    static = builder.static_batch(shape)
    graphed.prepare_for_capture(static.batch)
    n, h, g, d = shape.num_tokens, layer.num_heads, layer.num_kv_heads, layer.head_dim
    q, k, v = (torch.zeros(n, heads, d, dtype=dtype, device=device) for heads in (h, g, g))
    replay, out = _capture(lambda: graphed.forward(q, k, v, layer, kv, static.batch), device)
    pages = list(range(1, num_pages))
    for i, step in enumerate(steps):
        seqs, t = [], 0
        for j, (prefix, extend) in enumerate(step):
            mine = [pages[(7 * i + 3 * j + p) % len(pages)] for p in range(max_pages)]
            seqs.append(StepSeq(row=j + 1, prefix_len=prefix, extend_len=extend,
                                pages=mine[: -(-(prefix + extend) // page_size)],
                                new_tokens=[0] * extend, sample=True))
            t += extend
        for x in (q, k, v):
            x.copy_(torch.randn(x.shape, generator=gen).to(x))
        batch = builder.build(seqs, into=static)
        graphed.prepare_for_replay(batch, shape.num_requests)
        replay()
        got = out.clone()
        live = ForwardBatchBuilder(page_size=page_size, max_rows=len(seqs) + 1,
                                   max_pages=max_pages, device=device).build(seqs)
        want = eager.forward(q[:t], k[:t], v[:t], layer, kv, live)
        where = f"replay {i} ({len(step)} live of {shape.num_requests})"
        assert torch.isfinite(got[:t]).all(), f"{where}: a live row read page 0"
        assert torch.equal(got[:t], want), f"{where}: replay differs from eager"
        assert not got[t:].any(), f"{where}: a padded row read keys (stale or page 0)"


DECODE_STEPS = [
    [(150, 1), (3, 1), (70, 1), (64, 1), (200, 1), (9, 1)],
    [(33, 1), (128, 1)],  # rows 2..5 were live a step ago: cleared
    [(12, 1), (199, 1), (0, 1), (64, 1), (5, 1), (77, 1)],
    [(190, 1)],
]
VERIFY_STEPS = [[(150, 4), (3, 4), (70, 4)], [(61, 4)], [(0, 4), (140, 4), (64, 4)]]
PREFILL_STEPS = [[(0, 20), (100, 9), (3, 2)], [(150, 1)], [(0, 7), (60, 1), (129, 3)]]


# ---------------------------------------------------------------------------------------------
# CPU: the static buffer, and replays under the interpreter
# ---------------------------------------------------------------------------------------------


def test_replay_refills_live_rows_and_clears_every_padded_row():
    """After a 4-request step, a 1-request step leaves nothing of the other three: padded rows
    get their ``pad_extend_lens`` tokens and no key; the buffer keeps its address."""
    backend = make_backend()
    builder = ForwardBatchBuilder(page_size=16, max_rows=6, max_pages=4, device="cpu")
    backend.init_graph_buffers(4, 4, 4)
    static = builder.static_batch(GraphShape.decode(4))
    backend.prepare_for_capture(static.batch)
    meta = static.batch.attn_metadata
    address = meta.kv_lens.data_ptr()
    assert meta.kv_lens.tolist() == [0, 0, 0, 0]

    def step(lens):
        seqs = [StepSeq(row=i + 1, prefix_len=p, extend_len=1, pages=[i + 1] * 4, new_tokens=[0])
                for i, p in enumerate(lens)]
        batch = builder.build(seqs, into=static)
        backend.prepare_for_replay(batch, 4)
        return batch.attn_metadata

    assert step([40, 7, 16, 30]).kv_lens.tolist() == [41, 8, 17, 31]
    again = step([9])
    assert again is meta and again.kv_lens.data_ptr() == address
    assert again.kv_lens.tolist() == [10, 0, 0, 0]
    assert again.cu_q.tolist() == [0, 1, 2, 3, 4]


def test_replay_before_init_graph_buffers_is_refused_naming_the_call():
    backend = make_backend()
    batch = ForwardBatchBuilder(page_size=16, max_rows=3, max_pages=1, device="cpu").static_batch(
        GraphShape.decode(2)).batch
    with pytest.raises(RuntimeError, match="init_graph_buffers"):
        backend.prepare_for_capture(batch)


def test_a_request_longer_than_the_captured_page_table_is_refused():
    backend = make_backend(split_size=64)
    builder = ForwardBatchBuilder(page_size=16, max_rows=3, max_pages=8, device="cpu")
    backend.init_graph_buffers(2, 2, 4)  # 4 pages: 64 keys
    static = builder.static_batch(GraphShape.decode(2))
    backend.prepare_for_capture(static.batch)
    batch = builder.build([StepSeq(row=1, prefix_len=100, extend_len=1, pages=list(range(1, 8)),
                                   new_tokens=[0])], into=static)
    with pytest.raises(ValueError, match="max_pages"):
        backend.prepare_for_replay(batch, 2)


def test_decode_replays_equal_eager_bits_under_interpreter(interpreter):
    """Decode graphs run split mode; the eager steps fold (one split) or split: same bits."""
    replay_against_eager(GraphShape.decode(6), DECODE_STEPS, split_size=64)


def test_verify_shape_replays_equal_eager_bits_under_interpreter(interpreter):
    replay_against_eager(GraphShape.decode(3, 4), VERIFY_STEPS, split_size=64,
                         layer=make_layer(window=70))


def test_prefill_replays_equal_eager_bits_under_interpreter(interpreter):
    replay_against_eager(GraphShape.prefill(40, 3), PREFILL_STEPS, split_size=64)


# ---------------------------------------------------------------------------------------------
# CUDA: real graphs
# ---------------------------------------------------------------------------------------------

LONG_DECODE_STEPS = [
    [(1500, 1), (3, 1), (700, 1), (256, 1), (2000, 1), (9, 1), (511, 1), (1024, 1)],
    [(33, 1), (1280, 1)],
    [(12, 1), (1999, 1), (0, 1), (640, 1), (5, 1)],
]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("split_kv", ["auto", "never"])
def test_cuda_decode_graph_replays_equal_eager_bits(dtype, split_kv):
    """Qwen3-8B head shape, contexts up to 2001 keys (8 splits of 256)."""
    replay_against_eager(GraphShape.decode(8), LONG_DECODE_STEPS, device="cuda", dtype=dtype,
                         layer=make_layer(32, 8, 128), split_kv=split_kv)


@pytest.mark.gpu
@needs_cuda
def test_cuda_verify_graph_replays_equal_eager_bits():
    steps = [[(1500, 4), (3, 4), (700, 4)], [(610, 4)], [(0, 4), (1400, 4), (256, 4)]]
    replay_against_eager(GraphShape.decode(3, 4), steps, device="cuda", dtype=torch.bfloat16,
                         layer=make_layer(32, 8, 128, window=512))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.xfail(strict=True, reason="H200 2026-12-01: the prefill graph replay differs from "
                   "eager and an index assert follows; triton's prefill_graph claim is off until fixed")
def test_cuda_prefill_graph_replays_equal_eager_bits():
    steps = [[(0, 200), (1000, 50), (3, 6)], [(1500, 1)], [(0, 77), (600, 1), (1290, 130)]]
    replay_against_eager(GraphShape.prefill(256, 3), steps, device="cuda", dtype=torch.bfloat16,
                         layer=make_layer(32, 8, 128))
