"""Oracle: hinge's dense families against transformers' own code on tiny seeded checkpoints."""

from __future__ import annotations

import pytest
import torch
from model_oracle import (
    ARCHS,
    assert_logits_close,
    build_context,
    hf_logits,
    load_hf,
    load_hinge,
    paged,
)


def prompt(seed: int, n: int, vocab: int = 256) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(params=ARCHS)
def pair(request, tiny_checkpoint):
    path = tiny_checkpoint(request.param)
    return load_hinge(path), load_hf(path)


def test_single_prompt_prefilled_at_once_matches_transformers(pair):
    model, hf = pair
    ids = prompt(0, 37)
    out = paged(model).step([("a", ids)])
    assert_logits_close(out.logits, hf_logits(hf, ids))


def test_mixed_length_batch_in_one_step_matches_each_prompt_alone(pair):
    model, hf = pair
    prompts = [prompt(1, 5), prompt(2, 40), prompt(3, 1), prompt(4, 17)]
    steps = [(i, p) for i, p in enumerate(prompts)]
    runner = paged(model)
    per_request = runner.split(runner.step(steps), steps)
    for ids, ours in zip(prompts, per_request, strict=True):
        assert_logits_close(ours, hf_logits(hf, ids))


def test_chunked_prefill_then_token_by_token_decode_matches_transformers(pair):
    model, hf = pair
    ids = prompt(5, 50)
    ref = hf_logits(hf, ids)
    runner = paged(model, page_size=4)
    got = [runner.step([("a", ids[0:16])]).logits, runner.step([("a", ids[16:35])]).logits]
    got += [runner.step([("a", [tok])]).logits for tok in ids[35:]]
    assert_logits_close(torch.cat(got), ref)


def test_mixed_step_of_decodes_and_prefill_chunks_matches_transformers(pair):
    """Decodes, a continuing chunk and a new prompt share one step."""
    model, hf = pair
    a, b, c = prompt(6, 30), prompt(7, 45), prompt(8, 12)
    runner = paged(model)
    first = [("a", a[:28]), ("b", b[:20])]
    second = [("a", a[28:29]), ("b", b[20:45]), ("c", c)]
    third = [("a", a[29:30]), ("c", [7])]
    outs = [runner.split(runner.step(s), s) for s in (first, second, third)]
    assert_logits_close(torch.cat([outs[0][0], outs[1][0], outs[2][0]]), hf_logits(hf, a))
    assert_logits_close(torch.cat([outs[0][1], outs[1][1]]), hf_logits(hf, b))
    assert_logits_close(torch.cat([outs[1][2], outs[2][1]]), hf_logits(hf, c + [7]))


def test_logits_only_for_logits_indices(pair):
    model, hf = pair
    ids = prompt(9, 20)
    out = paged(model).step([("a", ids)], all_logits=False)
    assert out.logits.shape == (1, model.config.vocab_size)
    assert out.logits.dtype == torch.float32
    assert_logits_close(out.logits, hf_logits(hf, ids)[-1:])


def test_greedy_32_tokens_match_transformers_generate(pair):
    model, hf = pair
    ids = prompt(10, 9)
    with torch.no_grad():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, min_new_tokens=32)
    ref_new = ref[0, len(ids):].tolist()
    assert len(set(ref_new)) > 4, f"degenerate reference {ref_new}: the test would prove little"
    runner = paged(model)
    out = runner.step([("a", ids)], all_logits=False)
    ours = []
    for _ in range(32):
        ours.append(int(out.logits[-1].argmax()))
        out = runner.step([("a", [ours[-1]])])
    assert ours == ref_new


def test_greedy_batch_of_mixed_lengths_with_chunked_prefill_matches_transformers(pair):
    """Four prompts prefilled under a 16-token step budget, then decoded together for 32 tokens."""
    model, hf = pair
    prompts = [prompt(40 + i, n) for i, n in enumerate((3, 29, 11, 20))]
    refs = []
    for ids in prompts:
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, min_new_tokens=32)
        refs.append(out[0, len(ids):].tolist())
    runner = paged(model, page_size=8)
    done = [0] * len(prompts)
    generated: list[list[int]] = [[] for _ in prompts]
    while any(len(g) < 32 for g in generated):
        budget, steps = 16, []
        for i, ids in enumerate(prompts):
            if done[i] < len(ids) and budget > 0:
                n = min(budget, len(ids) - done[i])
                steps.append((i, ids[done[i] : done[i] + n]))
                done[i] += n
                budget -= n
            elif done[i] == len(ids) and generated[i] and len(generated[i]) < 32:
                steps.append((i, [generated[i][-1]]))
        logits = runner.split(runner.step(steps), steps)
        for (i, _), rows in zip(steps, logits, strict=True):
            if done[i] == len(prompts[i]) and len(generated[i]) < 32:
                generated[i].append(int(rows[-1].argmax()))
    assert generated == refs


def test_hidden_states_numbered_as_transformers_output_hidden_states(pair):
    model, hf = pair
    ids = prompt(11, 13)
    n = model.config.num_hidden_layers
    layers = tuple(range(n + 1))
    out = paged(model).step([("a", ids)], capture=layers)
    with torch.no_grad():
        ref = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states
    assert sorted(out.hidden_states) == list(layers)
    for i in layers:
        assert_logits_close(out.hidden_states[i], ref[i][0])


def test_hidden_state_index_out_of_range_is_refused_naming_the_range(pair):
    model, _ = pair
    n = model.config.num_hidden_layers
    with pytest.raises(ValueError, match=f"0..{n}"):
        paged(model).step([("a", [1, 2, 3])], capture=(0, n + 1))


def test_deterministic_mode_still_matches_transformers(tiny_checkpoint):
    path = tiny_checkpoint("qwen3_moe")
    model, hf = load_hinge(path, deterministic=True), load_hf(path)
    ids = prompt(12, 70)
    runner = paged(model, deterministic=True)
    got = torch.cat([runner.step([("a", ids[:33])]).logits, runner.step([("a", ids[33:])]).logits])
    assert_logits_close(got, hf_logits(hf, ids))


@pytest.mark.parametrize("arch", ARCHS)
def test_deterministic_logits_bit_identical_alone_batched_and_chunked(arch, tiny_checkpoint):
    model = load_hinge(tiny_checkpoint(arch), deterministic=True)
    target, others = prompt(13, 70), [prompt(14 + i, 3 + 11 * i) for i in range(5)]

    alone = paged(model, deterministic=True).step([("t", target)]).logits

    runner = paged(model, deterministic=True)
    steps = [(i, p) for i, p in enumerate(others)] + [("t", target)]
    batched = runner.split(runner.step(steps), steps)[-1]

    runner = paged(model, deterministic=True)
    chunks = []
    for lo, hi in ((0, 7), (7, 50), (50, 69), (69, 70)):
        steps = [("t", target[lo:hi]), ("x", prompt(20 + lo, 5))]
        chunks.append(runner.split(runner.step(steps), steps)[0])
    chunked = torch.cat(chunks)

    assert torch.equal(alone, batched)
    assert torch.equal(alone, chunked)


VARIANTS = {
    "qwen3_sliding_window": ("qwen3", dict(use_sliding_window=True, sliding_window=8, max_window_layers=1)),
    "llama_biases_default_rope": (
        "llama", dict(attention_bias=True, mlp_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    "llama_linear_rope_mha": (
        "llama", dict(num_key_value_heads=4, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
    ),
    "qwen3_moe_sparse_step_2_unnormed": ("qwen3_moe", dict(decoder_sparse_step=2, mlp_only_layers=[], norm_topk_prob=False)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_config_variants_match_transformers_prefilled_and_chunked(variant, tmp_path):
    from hinge.testing.checkpoints import make_tiny_checkpoint

    arch, overrides = VARIANTS[variant]
    path = make_tiny_checkpoint(arch, tmp_path, **overrides)
    model, hf = load_hinge(path), load_hf(path)
    ids = prompt(30, 40)
    ref = hf_logits(hf, ids)
    assert_logits_close(paged(model).step([("a", ids)]).logits, ref)
    runner = paged(model, page_size=4)
    got = [runner.step([("a", ids[:13])]).logits, runner.step([("a", ids[13:38])]).logits]
    got += [runner.step([("a", [tok])]).logits for tok in ids[38:]]
    assert_logits_close(torch.cat(got), ref)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_bfloat16_error_is_no_worse_than_transformers_own_bfloat16(arch, tiny_checkpoint):
    """bf16 has no exact oracle: hinge's distance to the float32 logits must stay within twice
    transformers' own bf16 distance (a wrong cast or a float32 norm weight would break this)."""
    from transformers import AutoModelForCausalLM

    from hinge.builtin.no_quant import NoQuantizer
    from hinge.builtin.torch_attention import TorchAttentionBackend
    from hinge.models.loader import load_model
    from hinge.testing.paged_steps import PagedSteps

    path = tiny_checkpoint(arch)
    build = build_context()
    build.dtype = torch.bfloat16
    model = load_model(path, device="cpu", dtype=torch.bfloat16, quantizer=NoQuantizer(None, build), progress=False)
    hf16 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager").eval()
    ids = prompt(50, 40)
    ref = hf_logits(load_hf(path), ids)
    ours = PagedSteps(model, TorchAttentionBackend(None, build)).step([("a", ids)]).logits
    ours_err = (ours - ref).abs().max() / ref.abs().max()
    hf_err = (hf_logits(hf16, ids) - ref).abs().max() / ref.abs().max()
    assert ours.dtype == torch.float32 and {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert ours_err <= 2 * hf_err, f"hinge bf16 error {ours_err:.3g} vs transformers bf16 {hf_err:.3g}"
