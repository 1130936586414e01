"""The Triton grouped-GEMM experts on CUDA (run on the GPU machine: ``pytest -m gpu tests/layers``):
equal to the float64 per-expert reference, batch invariant in deterministic mode, no host sync
(captured in a CUDA graph and replayed with new routings)."""

from __future__ import annotations

import pytest
import torch

from hinge.layers.fused_moe import fused_experts
from hinge.testing.quantized_layers import random_routing
from hinge.testing.reference import reference_moe

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: |ours - float64| <= bound * max(1, max |reference|)
BOUNDS = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


def make(num_tokens, num_experts, top_k, dtype, hidden=256, inter=192, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w13 = torch.randn(num_experts, 2 * inter, hidden, generator=gen) / hidden ** 0.5
    w2 = torch.randn(num_experts, hidden, inter, generator=gen) / inter ** 0.5
    x = torch.randn(num_tokens, hidden, generator=gen)
    ids, weights = random_routing(num_tokens, num_experts, top_k, dtype, gen)
    w13, w2, x = w13.to(dtype), w2.to(dtype), x.to(dtype)
    experts = [(w13[e, :inter], w13[e, inter:], w2[e]) for e in range(num_experts)]
    cuda = [t.cuda() for t in (x, w13, w2, ids, weights)]
    return cuda, experts, (x, ids, weights)


def assert_close_to_reference(out, ref, dtype):
    err = float((out.double().cpu() - ref).abs().max())
    bound = BOUNDS[dtype] * max(1.0, float(ref.abs().max()))
    assert err <= bound, f"max error {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens,num_experts,top_k", [(1, 8, 2), (5, 64, 8), (300, 8, 2), (1000, 128, 8)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_triton_experts_equal_the_float64_per_expert_reference(num_tokens, num_experts, top_k, dtype,
                                                                deterministic):
    (x, w13, w2, ids, weights), experts, cpu = make(num_tokens, num_experts, top_k, dtype)
    out = fused_experts(x, w13, w2, ids, weights, deterministic=deterministic)
    assert out.dtype == dtype and out.shape == x.shape
    assert_close_to_reference(out, reference_moe(cpu[0], experts, cpu[1], cpu[2]), dtype)


def test_triton_experts_match_the_cpu_grouped_path():
    (x, w13, w2, ids, weights), _, cpu = make(77, 16, 4, torch.float32, seed=1)
    out = fused_experts(x, w13, w2, ids, weights).cpu()
    expected = fused_experts(cpu[0], w13.cpu(), w2.cpu(), cpu[1], cpu[2])
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_deterministic_triton_row_is_bit_identical_alone_and_in_any_batch(dtype):
    (x, w13, w2, ids, weights), _, _ = make(257, 32, 4, dtype, seed=2)
    full = fused_experts(x, w13, w2, ids, weights, deterministic=True)
    for rows in (slice(0, 1), slice(100, 101), slice(33, 190), slice(256, 257)):
        alone = fused_experts(x[rows], w13, w2, ids[rows], weights[rows], deterministic=True)
        assert torch.equal(alone, full[rows]), f"rows {rows} changed with the batch"


def test_triton_experts_capture_in_a_cuda_graph_and_replay_new_routings():
    """No host sync in the forward: capture succeeds, and a replay with new inputs is correct."""
    (x, w13, w2, ids, weights), _, _ = make(16, 32, 4, torch.bfloat16, seed=3)
    fused_experts(x, w13, w2, ids, weights)  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fused_experts(x, w13, w2, ids, weights)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_experts(x, w13, w2, ids, weights)
    (new_x, _, _, new_ids, new_weights), _, _ = make(16, 32, 4, torch.bfloat16, seed=4)
    x.copy_(new_x)
    ids.copy_(new_ids)
    weights.copy_(new_weights)
    graph.replay()
    torch.cuda.synchronize()
    expected = fused_experts(new_x, w13, w2, new_ids, new_weights)
    assert torch.equal(out, expected)
