"""The sparse MoE block (router + stacked experts) against transformers, and the CPU grouped
experts against the float64 per-expert reference."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

from hinge.builtin.no_quant import NoQuantizer
from hinge.layers.fused_moe import fused_experts
from hinge.layers.moe import SparseMoeBlock
from hinge.plugins.specs import BuildContext
from hinge.testing.quantized_layers import random_routing
from hinge.testing.reference import reference_moe


def pair(norm_topk_prob: bool, deterministic: bool = False):
    cfg = Qwen3MoeConfig(
        hidden_size=32, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
        norm_topk_prob=norm_topk_prob,
    )
    torch.manual_seed(0)
    ref = Qwen3MoeSparseMoeBlock(cfg).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.3)
    build = BuildContext(device="cpu", dtype=torch.float32, deterministic=deterministic, page_size=16)
    ours = SparseMoeBlock(
        hidden_size=32, moe_intermediate_size=24, num_experts=6, top_k=2, norm_topk_prob=norm_topk_prob,
        hidden_act="silu", quantizer=NoQuantizer(None, build), dtype=torch.float32,
        deterministic=deterministic, prefix="mlp",
    )
    with torch.no_grad():
        ours.gate.weight.copy_(ref.gate.weight)
        ours.experts.w13_weight.copy_(ref.experts.gate_up_proj)  # (E, 2I, H): gate rows, then up
        ours.experts.w2_weight.copy_(ref.experts.down_proj)
    return ours, ref


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_sparse_moe_block_matches_transformers(norm_topk_prob):
    ours, ref = pair(norm_topk_prob)
    x = torch.randn(23, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x[None])[0], rtol=1e-5, atol=1e-5)


def test_routing_picks_the_top_k_softmax_experts_in_ascending_expert_order():
    ours, _ = pair(True)
    x = torch.randn(9, 32)
    weights, experts = ours.route(x)
    probs = torch.softmax(x.double() @ ours.gate.weight.double().T, dim=-1)
    top = probs.topk(2, dim=-1)
    order = top.indices.argsort(dim=-1)
    assert torch.equal(experts, top.indices.gather(1, order))
    assert bool((experts[:, :-1] < experts[:, 1:]).all())
    expected = top.values / top.values.sum(-1, keepdim=True)
    torch.testing.assert_close(weights.double(), expected.gather(1, order))


def test_deterministic_moe_row_is_bit_identical_alone_and_batched():
    ours, _ = pair(True, deterministic=True)
    x = torch.randn(40, 32)
    with torch.no_grad():
        alone = ours(x[17:18])
        batched = ours(x)[17:18]
        window = ours(x[9:30])[8:9]
    assert torch.equal(alone, batched)
    assert torch.equal(alone, window)


def experts_and_inputs(num_tokens: int, num_experts: int, top_k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    h, i = 48, 40
    w13 = torch.randn(num_experts, 2 * i, h, generator=gen) / h ** 0.5
    w2 = torch.randn(num_experts, h, i, generator=gen) / i ** 0.5
    x = torch.randn(num_tokens, h, generator=gen)
    ids, weights = random_routing(num_tokens, num_experts, top_k, torch.float32, gen)
    experts = [(w13[e, :i], w13[e, i:], w2[e]) for e in range(num_experts)]
    return x, w13, w2, ids, weights, experts


@pytest.mark.parametrize("num_tokens,num_experts,top_k", [(1, 8, 2), (17, 8, 2), (64, 5, 3), (3, 16, 1)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_grouped_experts_equal_the_float64_per_expert_reference(num_tokens, num_experts, top_k, deterministic):
    """Sorted tokens and one matmul per expert segment, experts without tokens included."""
    x, w13, w2, ids, weights, experts = experts_and_inputs(num_tokens, num_experts, top_k)
    out = fused_experts(x, w13, w2, ids, weights, deterministic=deterministic)
    torch.testing.assert_close(out.double(), reference_moe(x, experts, ids, weights), rtol=0, atol=2e-5)


def test_grouped_experts_of_no_tokens_are_an_empty_result():
    x, w13, w2, ids, weights, _ = experts_and_inputs(4, 4, 2)
    assert fused_experts(x[:0], w13, w2, ids[:0], weights[:0]).shape == (0, 48)


def test_a_token_sums_its_experts_in_slot_order():
    """With one expert hit twice as hard, the result is the slot-by-slot sum (not a reordered one)."""
    x, w13, w2, ids, weights, _ = experts_and_inputs(6, 4, 2, seed=3)
    out = fused_experts(x, w13, w2, ids, weights)
    i = w13.shape[1] // 2
    per_slot = []
    for j in range(2):
        e = ids[:, j]
        gate_up = torch.einsum("th,tnh->tn", x, w13[e])
        per_slot.append(torch.einsum("ti,thi->th", F.silu(gate_up[:, :i]) * gate_up[:, i:], w2[e]) * weights[:, j:j + 1])
    torch.testing.assert_close(out, per_slot[0] + per_slot[1], rtol=1e-6, atol=1e-6)


def test_the_cpu_path_never_imports_triton():
    code = (
        "import sys, torch\n"
        "from hinge.layers.fused_moe import fused_experts\n"
        "w13, w2 = torch.randn(4, 8, 6), torch.randn(4, 6, 4)\n"
        "ids = torch.tensor([[0, 2], [1, 3]]); w = torch.full((2, 2), 0.5)\n"
        "fused_experts(torch.randn(2, 6), w13, w2, ids, w)\n"
        "fused_experts(torch.randn(2, 6), w13, w2, ids, w, deterministic=True)\n"
        "assert 'triton' not in sys.modules, 'triton was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
