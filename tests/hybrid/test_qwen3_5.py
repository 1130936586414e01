"""Qwen3.5 text (plain and composite layout) vs transformers' own implementation."""

from __future__ import annotations

import pytest
import torch
from hybrid_harness import StepHarness, hf_model, load_hinge
from hybrid_oracle import PROMPTS, assert_logits_close, hf_greedy, hf_logits

ARCHS = ["Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"]


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_logits_match_transformers(hybrid_checkpoints, arch):
    path = hybrid_checkpoints(arch)
    hf, ours = hf_model(path), load_hinge(path)
    assert len(ours.recurrent_layers) == 2 and len(ours.attention_layers) == 2
    harness = StepHarness(ours)
    for i, prompt in enumerate(PROMPTS):
        out = harness.step([(f"r{i}", prompt)], all_logits=True)
        assert_logits_close(out.logits, hf_logits(hf, prompt))


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_32_tokens_match_transformers_token_for_token(hybrid_checkpoints, arch):
    path = hybrid_checkpoints(arch)
    hf, ours = hf_model(path), load_hinge(path)
    prompt = PROMPTS[0]
    assert StepHarness(ours).greedy("r", prompt, 32) == hf_greedy(hf, prompt, 32)


def test_decode_logits_after_chunked_prefill_match_transformers(hybrid_checkpoints):
    path = hybrid_checkpoints("Qwen3_5ForCausalLM")
    hf, ours = hf_model(path), load_hinge(path)
    seq = PROMPTS[0] + PROMPTS[2]
    harness = StepHarness(ours)
    logits = [harness.step([("r", seq[0:5])], all_logits=True).logits,
              harness.step([("r", seq[5:6])], all_logits=True).logits,
              harness.step([("r", seq[6:14])], all_logits=True).logits]
    logits += [harness.step([("r", [t])]).logits for t in seq[14:]]
    assert_logits_close(torch.cat(logits), hf_logits(hf, seq))


def test_composite_with_tied_embeddings_and_an_mtp_head_loads_the_text_model(tmp_path):
    """Real Qwen3.5 checkpoints tie at the top level and ship ``mtp.*`` weights: both handled."""
    import transformers as tf
    from hybrid_harness import tiny_hf_config
    from safetensors.torch import load_file, save_file

    torch.manual_seed(3)
    config = tiny_hf_config("Qwen3_5ForConditionalGeneration")
    config.tie_word_embeddings = True
    hf = tf.Qwen3_5ForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        hf.model.language_model.embed_tokens.weight.normal_(0, 0.5)
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in tensors
    tensors["mtp.fc.weight"] = torch.zeros(4, 4)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ours = load_hinge(tmp_path)
    assert ours.config.tie_word_embeddings
    prompt = PROMPTS[0]
    out = StepHarness(ours).step([("r", prompt)], all_logits=True)
    assert_logits_close(out.logits, hf_logits(hf, prompt))
