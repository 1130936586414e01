"""Overlap scheduling: collecting step n's results after launching step n + 1 changes nothing a
client sees. On CPU nothing runs concurrently, but every piece of the lagged bookkeeping runs
(pending tokens read on the device, stops found one step late, aborts and retraction in flight),
so each case is compared with the same engine collecting every step at once."""

from __future__ import annotations

import pytest
import torch

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams


def _engine(path, overlap: bool, **options) -> Engine:
    engine = Engine(EngineConfig(model=str(path), **options), progress=False)
    engine.overlap = overlap
    return engine


def _prompts(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(32, 127, (n,), generator=g).tolist() for n in lens]


def _run(engine: Engine, prompts, params, abort_after: dict[int, int] | None = None):
    params = params if isinstance(params, list) else [params] * len(prompts)
    rids = [engine.add_request(p, sp) for p, sp in zip(prompts, params, strict=True)]
    done, steps, streamed = {}, 0, {r: [] for r in rids}
    while engine.has_unfinished():
        for out in engine.step():
            streamed[out.rid] += out.new_token_ids
            assert out.finished or out.token_ids is None, "a running request's output is a delta"
            if out.finished:
                done[out.rid] = out
        steps += 1
        for i, at in (abort_after or {}).items():
            if steps == at:
                engine.abort_request(rids[i])
    assert engine.stats().kv_pages_used == 0, "no page is held but by the prefix cache"
    assert engine.flush_cache() and engine.scheduler.allocator.num_used == 0, "every page is returned"
    outs = [done[r] for r in rids]
    for out in outs:
        assert streamed[out.rid] == out.token_ids, "deltas add up to the final token list"
    return [(o.token_ids, o.text, o.finish_reason, o.logprobs, o.top_logprobs, o.prompt_logprobs)
            for o in outs]


def _both(path, prompts, params, **options):
    eager = _run(_engine(path, False, **options), prompts, params)
    lagged = _run(_engine(path, True, **options), prompts, params)
    return eager, lagged


def test_greedy_sampled_and_penalised_requests_are_the_same_with_overlap(tiny_qwen3):
    prompts = _prompts([5, 17, 3, 30, 9, 12])
    params = [
        SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True),
        SamplingParams(max_new_tokens=9, temperature=0.8, top_p=0.9, seed=3, logprobs=True),
        SamplingParams(max_new_tokens=15, temperature=0, repetition_penalty=1.3,
                       frequency_penalty=0.5, presence_penalty=0.2, top_logprobs=3),
        SamplingParams(max_new_tokens=4, temperature=1.0, top_k=5, seed=7,
                       prompt_logprobs_start=2),
        SamplingParams(max_new_tokens=0, prompt_logprobs_start=0),
        SamplingParams(max_new_tokens=11, temperature=0.7, min_p=0.1, seed=1,
                       presence_penalty=1.0),
    ]
    eager, lagged = _both(tiny_qwen3, prompts, params, chunked_prefill_size=16)
    assert lagged == eager
    assert eager[4][0] == [] and len(eager[4][5]) == len(prompts[4]) - 1, "a 0-token request still gets prompt logprobs"


def test_stops_found_a_step_late_end_at_the_same_token(tiny_qwen3):
    prompts = _prompts([6, 11])
    ref = _run(_engine(tiny_qwen3, False), prompts,
               SamplingParams(max_new_tokens=20, temperature=0, ignore_eos=True))
    stop_token = ref[0][0][4]
    stop_text = ref[1][1][3:5]
    params = [SamplingParams(max_new_tokens=20, temperature=0, stop_token_ids=[stop_token]),
              SamplingParams(max_new_tokens=20, temperature=0, stop=[stop_text])]
    eager, lagged = _both(tiny_qwen3, prompts, params)
    assert lagged == eager
    assert eager[0][2] == "stop" and eager[0][0][-1] == stop_token
    assert eager[1][2] == "stop" and stop_text not in eager[1][1]


def test_an_abort_while_a_step_is_in_flight_returns_its_pages(tiny_qwen3):
    prompts = _prompts([8, 8, 8])
    params = SamplingParams(max_new_tokens=30, temperature=0, ignore_eos=True)
    engine = _engine(tiny_qwen3, True)
    outs = _run(engine, prompts, params, abort_after={1: 4})
    assert [o[2] for o in outs] == ["length", "abort", "length"]


@pytest.mark.parametrize("overlap", [False, True])
def test_retraction_with_a_token_in_flight_recomputes_the_same_tokens(tiny_qwen3, overlap):
    """A pool too small for every request forces retraction in the middle of decoding."""
    prompts = _prompts([20, 22, 24, 26])
    params = SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True)
    roomy = _run(_engine(tiny_qwen3, False), prompts, params)
    engine = _engine(tiny_qwen3, overlap, page_size=4, kv_cache_bytes=40 * 4 * 2 * 2 * 16 * 4)
    tight = _run(engine, prompts, params)
    assert engine.scheduler.num_retractions > 0, "the test must retract to mean anything"
    assert [t[0] for t in tight] == [r[0] for r in roomy]


def test_hybrid_model_gives_the_same_tokens_with_overlap(tmp_path):
    from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

    path = make_tiny_checkpoint("qwen3_5", tmp_path / "hybrid", seed=2)
    write_byte_tokenizer(path)
    prompts = _prompts([7, 19, 4])
    params = SamplingParams(max_new_tokens=10, temperature=0, ignore_eos=True, logprobs=True)
    eager, lagged = _both(path, prompts, params, chunked_prefill_size=8)
    assert lagged == eager


@pytest.mark.gpu
def test_overlap_on_cuda_gives_the_same_outputs_as_collecting_every_step(tiny_qwen3):
    """On CUDA the lag is real: step n + 1 is queued before step n's results are read."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    prompts = _prompts([5, 17, 3, 30])
    params = [
        SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True, logprobs=True),
        SamplingParams(max_new_tokens=9, temperature=0.8, top_p=0.9, seed=3, top_logprobs=2),
        SamplingParams(max_new_tokens=15, temperature=0, repetition_penalty=1.3,
                       frequency_penalty=0.5, prompt_logprobs_start=1),
        SamplingParams(max_new_tokens=7, temperature=1.0, top_k=5, seed=7, presence_penalty=0.4),
    ]
    eager, lagged = _both(tiny_qwen3, prompts, params, device="cuda", dtype="float32",
                          chunked_prefill_size=16)
    assert lagged == eager
