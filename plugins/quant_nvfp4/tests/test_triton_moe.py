"""The grouped NVFP4 experts kernel against the CPU reference of the same experts: under
Triton's interpreter on CPU, and (marked gpu) on CUDA and in a captured graph."""

from __future__ import annotations

import pytest
import torch
from nvfp4_interpreter import load_interpreted, patch_interpreter

from hinge.testing.quantized_layers import random_routing
from hinge_nvfp4 import format as fp4
from hinge_nvfp4.moe import experts_cpu


def experts(e: int, h: int, i: int, seed: int, device: str = "cpu"):
    gen = torch.Generator().manual_seed(seed)

    def stack(rows, cols, parts):
        packed, scales, row = [], [], []
        for _ in range(e):
            ws = [torch.randn(rows // parts, cols, generator=gen) for _ in range(parts)]
            amax = torch.stack([w.abs().amax() for w in ws]).amax()
            p, s, s2 = fp4.quantize_weight(torch.cat(ws), amax)
            packed.append(p)
            scales.append(s)
            row.append(torch.full((rows,), float(s2)))
        return [torch.stack(t).to(device) for t in (packed, scales, row)] + [None]

    return stack(2 * i, h, 2), stack(h, i, 1)


@pytest.mark.parametrize("tokens, deterministic", [(1, True), (9, False), (40, False)])
def test_interpreted_grouped_kernel_equals_the_cpu_experts(monkeypatch, tokens, deterministic):
    patch_interpreter(monkeypatch)
    moe = load_interpreted("triton_moe")
    w13, w2 = experts(4, 32, 32, seed=tokens)
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, 32, generator=gen)
    ids, weights = random_routing(tokens, 4, 2, torch.float32, gen)
    got = moe.nvfp4_experts(x, tuple(w13), tuple(w2), ids, weights, deterministic=deterministic)
    expected = experts_cpu(x, tuple(w13), tuple(w2), ids, weights)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), float((got - expected).abs().max())


@pytest.mark.gpu
def test_cuda_grouped_kernel_equals_the_cpu_experts_and_replays_in_a_graph():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4.triton_moe import nvfp4_experts

    w13, w2 = experts(8, 256, 128, seed=1, device="cuda")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(37, 256, generator=gen).to(torch.bfloat16)
    ids, weights = random_routing(37, 8, 2, torch.bfloat16, gen)
    x, ids, weights = x.cuda(), ids.cuda(), weights.cuda()
    got = nvfp4_experts(x, tuple(w13), tuple(w2), ids, weights)
    expected = experts_cpu(x.cpu(), tuple(t.cpu() if t is not None else None for t in w13),
                           tuple(t.cpu() if t is not None else None for t in w2), ids.cpu(), weights.cpu())
    assert torch.allclose(got.cpu().float(), expected.float(), rtol=3e-2, atol=3e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = nvfp4_experts(x, tuple(w13), tuple(w2), ids, weights)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, got)
