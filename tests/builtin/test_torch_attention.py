"""The ``torch`` attention backend against a float64 recompute, and its deterministic mode."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.contracts import AttentionLayer
from hinge.layers.batch_invariant import KV_BLOCK
from hinge.plugins.specs import BuildContext
from hinge.testing.paged_steps import PagedSteps

D = 16


def make_layer(num_heads=4, num_kv_heads=2, window=None) -> AttentionLayer:
    return AttentionLayer(
        kv_layer_id=0, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=D, scale=D**-0.5,
        sliding_window=window,
    )


def sequences(layer: AttentionLayer, lens: dict, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        rid: (
            torch.randn(n, layer.num_heads, D, generator=g),
            torch.randn(n, layer.num_kv_heads, D, generator=g),
            torch.randn(n, layer.num_kv_heads, D, generator=g),
        )
        for rid, n in lens.items()
    }


def reference(layer: AttentionLayer, q, k, v) -> torch.Tensor:
    """Float64 causal (windowed) GQA attention of one whole sequence: (L, H, D)."""
    rep = layer.num_heads // layer.num_kv_heads
    q, k, v = q.double(), k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * layer.scale
    pos = torch.arange(q.shape[0])
    allowed = pos[None, :] <= pos[:, None]
    if layer.sliding_window is not None:
        allowed &= pos[None, :] > pos[:, None] - layer.sliding_window
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def run(layer, seqs, schedule, *, page_size=16, deterministic=False, device="cpu"):
    """Run ``schedule`` (a list of steps, each a list of (rid, lo, hi)); outputs per rid, in order."""
    build = BuildContext(device=device, dtype=torch.float32, deterministic=deterministic, page_size=page_size)
    backend = TorchAttentionBackend(None, build)
    fake_model = SimpleNamespace(attention_layers=[layer], dtype=torch.float32)
    paged = PagedSteps(fake_model, backend, page_size=page_size, device=device)
    outs = {rid: [] for rid in seqs}
    for step in schedule:
        batch = paged.batch([(rid, [0] * (hi - lo)) for rid, lo, hi in step])
        batch.attn_metadata = backend.prepare_metadata(batch)
        q, k, v = (
            torch.cat([seqs[rid][i][lo:hi] for rid, lo, hi in step]).to(device) for i in range(3)
        )
        out = backend.forward(q, k, v, layer, paged.kv, batch).cpu()
        sizes = [hi - lo for _, lo, hi in step]
        for (rid, _, _), part in zip(step, out.split(sizes), strict=True):
            outs[rid].append(part)
    return {rid: torch.cat(parts) for rid, parts in outs.items() if parts}


def mixed_schedule():
    """Prefill, chunked prefill, and several decodes sharing steps."""
    return [
        [("a", 0, 20), ("b", 0, 7)],
        [("a", 20, 21), ("b", 7, 30), ("c", 0, 1)],
        [("a", 21, 22), ("b", 30, 31), ("c", 1, 2), ("d", 0, 70)],
        [("a", 22, 23), ("b", 31, 32), ("c", 2, 3), ("d", 70, 71)],
    ]


LENS = {"a": 23, "b": 32, "c": 3, "d": 71}


def assert_matches_reference(layer, seqs, outs, tol=1e-5):
    for rid, out in outs.items():
        q, k, v = seqs[rid]
        ref = reference(layer, q, k, v)[: out.shape[0]]
        torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("heads", [(4, 2), (4, 1), (2, 2)], ids=["gqa", "mqa", "mha"])
@pytest.mark.parametrize("window", [None, 5])
def test_mixed_batches_match_float64_reference(page_size, heads, window):
    layer = make_layer(*heads, window=window)
    seqs = sequences(layer, LENS)
    outs = run(layer, seqs, mixed_schedule(), page_size=page_size)
    assert_matches_reference(layer, seqs, outs)


@pytest.mark.parametrize("window", [None, 5, 70])
def test_deterministic_mode_matches_float64_reference(window):
    layer = make_layer(window=window)
    seqs = sequences(layer, LENS)
    assert_matches_reference(layer, seqs, run(layer, seqs, mixed_schedule(), deterministic=True))


def test_writes_new_keys_and_values_at_out_loc():
    layer = make_layer()
    build = BuildContext(device="cpu", dtype=torch.float32, deterministic=False, page_size=4)
    backend = TorchAttentionBackend(None, build)
    paged = PagedSteps(SimpleNamespace(attention_layers=[layer], dtype=torch.float32), backend, page_size=4)
    q, k, v = sequences(layer, {"a": 6})["a"]
    batch = paged.batch([("a", [0] * 6)])
    backend.forward(q, k, v, layer, paged.kv, batch)
    assert torch.equal(paged.kv.k[0][batch.out_loc], k)
    assert torch.equal(paged.kv.v[0][batch.out_loc], v)


@pytest.mark.parametrize("window", [None, 40])
def test_deterministic_output_bit_identical_alone_batched_and_chunked(window):
    layer = make_layer(window=window)
    n = 3 * KV_BLOCK + 11
    seqs = sequences(layer, {"t": n, "x": 90, "y": 5})
    alone = run(layer, seqs, [[("t", 0, n)]], deterministic=True)["t"]
    batched = run(layer, seqs, [[("x", 0, 90), ("t", 0, n), ("y", 0, 5)]], deterministic=True)["t"]
    chunked_steps = [
        [("t", 0, 1)], [("t", 1, 63), ("x", 0, 40)], [("x", 40, 41), ("t", 63, 130)],
        [("t", 130, n - 1), ("y", 0, 5)], [("x", 41, 42), ("t", n - 1, n)],
    ]
    chunked = run(layer, seqs, chunked_steps, deterministic=True)["t"]
    token_by_token = run(layer, seqs, [[("t", i, i + 1)] for i in range(n)], deterministic=True)["t"]
    assert torch.equal(alone, batched)
    assert torch.equal(alone, chunked)
    assert torch.equal(alone, token_by_token)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("deterministic", [False, True])
def test_cuda_matches_float64_reference(deterministic):
    layer = make_layer(window=5)
    seqs = sequences(layer, LENS)
    outs = run(layer, seqs, mixed_schedule(), deterministic=deterministic, device="cuda")
    assert_matches_reference(layer, seqs, outs, tol=1e-3)
