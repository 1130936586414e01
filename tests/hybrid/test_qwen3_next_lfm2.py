"""Qwen3-Next (GDN + MoE with shared expert) and LFM2 (short conv) vs transformers."""

from __future__ import annotations

import pytest
from hybrid_harness import StepHarness, hf_model, load_hinge
from hybrid_oracle import PROMPTS, assert_logits_close, hf_greedy, hf_logits

ARCHS = ["Qwen3NextForCausalLM", "Lfm2ForCausalLM"]


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_logits_match_transformers(hybrid_checkpoints, arch):
    path = hybrid_checkpoints(arch)
    hf, ours = hf_model(path), load_hinge(path)
    harness = StepHarness(ours)
    for i, prompt in enumerate(PROMPTS):
        out = harness.step([(f"r{i}", prompt)], all_logits=True)
        assert_logits_close(out.logits, hf_logits(hf, prompt))


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_32_tokens_match_transformers_token_for_token(hybrid_checkpoints, arch):
    path = hybrid_checkpoints(arch)
    hf, ours = hf_model(path), load_hinge(path)
    prompt = PROMPTS[0]
    assert StepHarness(ours).greedy("r", prompt, 32, chunk=5) == hf_greedy(hf, prompt, 32)


def test_lfm2_has_three_conv_layers_and_one_kv_layer(hybrid_checkpoints):
    ours = load_hinge(hybrid_checkpoints("Lfm2ForCausalLM"))
    assert [s.layer_id for s in ours.recurrent_layers] == [0, 2, 3]
    assert [a.kv_layer_id for a in ours.attention_layers] == [0]
    assert all(s.ssm_shape == () and s.conv_kernel == 3 for s in ours.recurrent_layers)
