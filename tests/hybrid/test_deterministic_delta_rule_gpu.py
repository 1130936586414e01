"""The deterministic gated delta rule on CUDA (the Triton token-recurrence kernel; run on the GPU
host: ``pytest -m gpu tests/hybrid``): bits independent of batch, chunking and prefill vs decode
rows at Qwen3.5 head sizes in bf16, close to float64, replayable in a CUDA graph; and a tiny
hybrid model's deterministic logprobs the same alone, batched, chunked and rescored."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from hinge.layers.recurrent_kernels import get_recurrent_kernels
from hinge.testing.reference import reference_gated_delta_rule

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

QWEN3_5 = dict(hk=16, hv=32, dk=128, dv=128)


def inputs(lens, hk, hv, dk, dv, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t, b = sum(lens), len(lens)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    xs = (rand(t, hk, dk).bfloat16(), rand(t, hk, dk).bfloat16(), rand(t, hv, dv).bfloat16(),
          torch.nn.functional.logsigmoid(rand(t, hv) + 3.0), torch.sigmoid(rand(t, hv)).bfloat16())
    return xs, rand(b, hv, dk, dv) * 0.1, cu


def rule(xs, s0, cu, track=False):
    kernels = get_recurrent_kernels("cuda", deterministic=True)
    return kernels.gated_delta_rule(*xs, s0, cu, track_states=track)


def piece(xs, a, b):
    return [x[a:b] for x in xs]


def test_outputs_and_state_are_close_to_float64_at_qwen3_5_head_sizes():
    xs, s0, cu = inputs([200], **QWEN3_5)
    res = rule(xs, s0, cu)
    out64, s64, _ = reference_gated_delta_rule(*xs, s0[0])
    assert res.out.dtype == torch.bfloat16
    out_err = float((res.out.double() - out64).abs().max() / out64.abs().max())
    state_err = float((res.final_state[0].double() - s64).abs().max() / s64.abs().max())
    assert out_err < 1e-2 and state_err < 1e-4, (out_err, state_err)


def test_a_prefill_split_anywhere_or_token_by_token_gives_the_same_bits():
    xs, s0, cu = inputs([1000], **QWEN3_5, seed=1)
    whole = rule(xs, s0, cu)
    for splits in ([0, 100, 101, 357, 1000], [0, 64, 128, 999, 1000], [0, *range(960, 1001)]):
        state, outs = s0, []
        for a, b in pairwise(splits):
            part = rule(piece(xs, a, b), state, [0, b - a])
            state, outs = part.final_state, outs + [part.out]
        assert torch.equal(torch.cat(outs), whole.out), splits
        assert torch.equal(state, whole.final_state), splits


def test_a_request_has_the_same_bits_alone_and_in_a_mixed_batch_with_states_per_row():
    lens = [1, 300, 17, 1, 64, 65, 1, 5]
    xs, s0, cu = inputs(lens, **QWEN3_5, seed=2)
    batch = rule(xs, s0, cu, track=True)
    for i, (a, b) in enumerate(pairwise(cu)):
        alone = rule(piece(xs, a, b), s0[i : i + 1], [0, b - a], track=True)
        assert torch.equal(batch.out[a:b], alone.out), i
        assert torch.equal(batch.final_state[i], alone.final_state[0]), i
        assert torch.equal(batch.position_states[a:b], alone.position_states), i
        assert torch.equal(alone.position_states[-1], alone.final_state[0]), i


def test_decode_rows_in_a_batch_of_64_equal_the_prefill_rows():
    xs, s0, _ = inputs([12], **QWEN3_5, seed=3)
    prefill = rule(xs, s0, [0, 12])
    others, other_states, cu = inputs([1] * 64, **QWEN3_5, seed=4)
    state = s0
    for t in range(12):
        row = (t * 13) % 64
        batch = [o.clone() for o in others]
        for x, mine in zip(batch, xs, strict=True):
            x[row] = mine[t]
        states = other_states.clone()
        states[row] = state[0]
        step = rule(batch, states, cu)
        assert torch.equal(step.out[row], prefill.out[t]), t
        state = step.final_state[row : row + 1]
    assert torch.equal(state, prefill.final_state)


def test_decode_step_replays_in_a_cuda_graph_with_the_eager_bits():
    xs, s0, cu = inputs([1] * 16, **QWEN3_5, seed=5)
    static = [x.clone() for x in xs] + [s0.clone()]
    rule(static[:5], static[5], cu)  # compile and build the layout outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = rule(static[:5], static[5], cu)
    for seed in (6, 7):
        fresh, fresh_s0, _ = inputs([1] * 16, **QWEN3_5, seed=seed)
        for dst, src in zip(static, [*fresh, fresh_s0], strict=True):
            dst.copy_(src)
        graph.replay()
        eager = rule(fresh, fresh_s0, cu)
        assert torch.equal(captured.out, eager.out)
        assert torch.equal(captured.final_state, eager.final_state)


def test_hybrid_logprobs_on_cuda_are_the_same_alone_batched_chunked_and_rescored(hybrid_checkpoints):
    """Deterministic mode end to end: a request's greedy logprobs alone, in a batch with chunked
    prefill, and as the prompt logprobs of a cold rescore of its own output (prefill rows)."""
    from hybrid_harness import VOCAB

    from hinge import LLM, SamplingParams
    from hinge.testing.checkpoints import write_byte_tokenizer

    path = hybrid_checkpoints("Qwen3_5ForCausalLM")
    if not (path / "tokenizer.json").exists():
        write_byte_tokenizer(path, VOCAB)
    gen = torch.Generator().manual_seed(8)
    prompts = [torch.randint(2, VOCAB - 1, (n,), generator=gen).tolist() for n in (23, 5, 40, 2, 11)]
    params = SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True, logprobs=True)
    kw = dict(device="cuda", dtype="bfloat16", deterministic=True, page_size=4)
    with LLM(str(path), **kw) as llm:
        alone = llm.generate([prompts[0]], params)[0]
        rescore = llm.generate([prompts[0] + alone.token_ids[:-1]], SamplingParams(
            max_new_tokens=1, temperature=0, ignore_eos=True, logprobs=True,
            prompt_logprobs_start=len(prompts[0])))[0]
    with LLM(str(path), chunked_prefill_size=7, **kw) as llm:
        batched = llm.generate(prompts[::-1], params)[-1]
    assert batched.token_ids == alone.token_ids
    assert batched.logprobs == alone.logprobs
    assert rescore.prompt_logprobs + rescore.logprobs == alone.logprobs, "prefill rows differ from decode rows"
