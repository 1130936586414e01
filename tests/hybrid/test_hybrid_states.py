"""Recurrent state through the models: batching, chunking, per-position states, hidden states."""

from __future__ import annotations

import pytest
import torch
from hybrid_harness import StepHarness, hf_model, load_hinge
from hybrid_oracle import PROMPTS, assert_logits_close, hf_greedy

ARCHS = ["Qwen3_5ForCausalLM", "Qwen3NextForCausalLM", "Lfm2ForCausalLM"]
#: one per recurrent layer kind (Qwen3-Next shares Qwen3.5's DeltaNet; its own layout is covered
#: by the oracle tests and the continuous-batching test below)
STATE_ARCHS = ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"]
SEQ = [3, 17, 45, 8, 91, 22, 5, 60, 33, 12, 7, 70, 41, 9, 14, 2, 50, 51, 52]


def pool_states(harness: StepHarness, rid: str) -> list[torch.Tensor]:
    slot = harness.reqs[rid].slot
    pool = harness.states
    return [t[slot].clone() for t in pool.conv + pool.ssm if t is not None]


def assert_states_close(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", STATE_ARCHS)
def test_final_states_are_the_same_for_one_chunk_several_chunks_and_token_by_token(hybrid_checkpoints, arch):
    harness = StepHarness(load_hinge(hybrid_checkpoints(arch)))
    harness.step([("whole", SEQ)])
    for s, e in [(0, 7), (7, 8), (8, 19)]:
        harness.step([("chunks", SEQ[s:e])])
    for t in SEQ:
        harness.step([("tokens", [t])])
    whole = pool_states(harness, "whole")
    assert any(x.abs().sum() > 0 for x in whole)
    assert_states_close(pool_states(harness, "chunks"), whole)
    assert_states_close(pool_states(harness, "tokens"), whole)


@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_position_states_of_a_verify_step_equal_states_of_each_prefix_and_restore_exactly(
    hybrid_checkpoints, arch
):
    harness = StepHarness(load_hinge(hybrid_checkpoints(arch)))
    prefix, block = SEQ[:9], SEQ[9:14]  # a k+1 = 5 token step after a 9-token prefill
    harness.step([("v", prefix)])
    out = harness.step([("other", [4, 4]), ("v", block)], track_states=True)
    states = out.position_states
    assert states is not None and states.cu_extend == [0, 2, 7]
    for n in range(1, len(block) + 1):
        ref = StepHarness(harness.model)
        ref.step([("p", prefix + block[:n])])
        kept = harness.states.allocate()
        states.write(harness.states, states.row(request=1, num_tokens=n), kept)
        pool = harness.states
        got = [t[kept] for t in pool.conv + pool.ssm if t is not None]
        assert_states_close(got, pool_states(ref, "p"))
        harness.states.free(kept)
    # rollback: keep 2 of the 5 tokens, then decode; logits equal a run that never saw the rest
    req = harness.reqs["v"]
    states.write(harness.states, states.row(request=1, num_tokens=2), req.slot)
    req.num_computed = len(prefix) + 2
    ours = harness.step([("v", [33])]).logits
    ref = StepHarness(harness.model)
    ref.step([("p", prefix + block[:2])])
    torch.testing.assert_close(ours, ref.step([("p", [33])]).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_continuous_batch_of_mixed_lengths_with_chunked_prefill_gives_transformers_tokens(
    hybrid_checkpoints, arch
):
    """Requests join at different steps, prefill in chunks of 4 beside others' decode steps."""
    path = hybrid_checkpoints(arch)
    hf, harness = hf_model(path), StepHarness(load_hinge(path))
    max_new = 12
    pending = {f"r{i}": list(p) for i, p in enumerate(PROMPTS)}
    outputs: dict[str, list[int]] = {rid: [] for rid in pending}
    joined: list[str] = []
    for step in range(200):
        if step < len(PROMPTS):
            joined.append(f"r{step}")
        chunks = []
        for rid in joined:
            if pending[rid]:
                chunks.append((rid, pending[rid][:4]))
            elif len(outputs[rid]) < max_new:
                chunks.append((rid, outputs[rid][-1:]))
        if not chunks:
            break
        logits = harness.step(chunks).logits
        for (rid, toks), row in zip(chunks, logits, strict=True):
            if pending[rid]:
                pending[rid] = pending[rid][len(toks):]
                if pending[rid]:
                    continue
            outputs[rid].append(int(row.argmax()))
    for i, prompt in enumerate(PROMPTS):
        assert outputs[f"r{i}"] == hf_greedy(hf, prompt, max_new), f"request {i}"


@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_hidden_states_are_numbered_as_transformers_output_hidden_states(hybrid_checkpoints, arch):
    path = hybrid_checkpoints(arch)
    hf, harness = hf_model(path), StepHarness(load_hinge(path))
    prompt = PROMPTS[0]
    out = harness.step([("r", prompt)], capture=(0, 1, 2, 3, 4))
    with torch.no_grad():
        ref = hf(torch.tensor([prompt]), output_hidden_states=True).hidden_states
    assert sorted(out.hidden_states) == list(range(len(ref)))
    for i, h in out.hidden_states.items():
        assert_logits_close(h, ref[i][0])


@pytest.mark.parametrize("arch", STATE_ARCHS)
def test_deterministic_logits_are_bit_identical_alone_in_a_batch_and_chunked(hybrid_checkpoints, arch):
    model = load_hinge(hybrid_checkpoints(arch), deterministic=True)
    prompt, follow = SEQ[:15], [33, 4, 71]

    def run(chunks_of_a: list[list[int]], others: bool) -> torch.Tensor:
        harness = StepHarness(model, deterministic=True)
        rows = []
        for i, chunk in enumerate(chunks_of_a + [[t] for t in follow]):
            batch = [("a", chunk)]
            if others:  # different company every step: a prefill, then decodes
                batch += [("b", SEQ[i : i + 5]), ("c", [7 + i])]
            rows.append(harness.step(batch, all_logits=True).logits[: len(chunk)])
        return torch.cat(rows)

    alone = run([prompt], others=False)
    assert torch.equal(run([prompt], others=True), alone)
    assert torch.equal(run([prompt[:4], prompt[4:5], prompt[5:]], others=True), alone)
