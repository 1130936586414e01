from __future__ import annotations

import pytest
import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

from hinge.builtin.no_quant import NoQuantizer
from hinge.layers.moe import SparseMoeBlock
from hinge.plugins.specs import BuildContext


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
        for e, expert in enumerate(ours.experts):
            gate, up = ref.experts.gate_up_proj[e].chunk(2, dim=0)
            expert.gate_proj.weight.copy_(gate)
            expert.up_proj.weight.copy_(up)
            expert.down_proj.weight.copy_(ref.experts.down_proj[e])
    return ours, ref


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_sparse_moe_block_matches_transformers(norm_topk_prob):
    ours, ref = pair(norm_topk_prob)
    x = torch.randn(23, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x[None])[0], rtol=1e-5, atol=1e-5)


def test_routing_picks_the_top_k_softmax_experts():
    ours, _ = pair(True)
    x = torch.randn(9, 32)
    weights, experts = ours.route(x)
    probs = torch.softmax(x.double() @ ours.gate.weight.double().T, dim=-1)
    top = probs.topk(2, dim=-1)
    assert torch.equal(experts, top.indices)
    torch.testing.assert_close(weights.double(), top.values / top.values.sum(-1, keepdim=True))


def test_deterministic_moe_row_is_bit_identical_alone_and_batched():
    ours, _ = pair(True, deterministic=True)
    x = torch.randn(40, 32)
    with torch.no_grad():
        alone = ours(x[17:18])
        batched = ours(x)[17:18]
    assert torch.equal(alone, batched)
