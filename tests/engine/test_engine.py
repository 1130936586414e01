"""The engine loop on a tiny Qwen3: stops, validation, abort, pool exhaustion, determinism."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams
from hinge.testing.engine_runs import run_requests

GREEDY = SamplingParams(max_new_tokens=32, temperature=0, ignore_eos=True)


def _engine(path, **options) -> Engine:
    return Engine(EngineConfig(model=str(path), **options), progress=False)


def _run(engine: Engine, prompts, params) -> list:
    return run_requests(engine, prompts, params)


def _prompts(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(32, 127, (n,), generator=g).tolist() for n in lens]


@pytest.fixture(scope="module")
def engine(tiny_qwen3):
    return _engine(tiny_qwen3)


@pytest.fixture(scope="module")
def reference(engine):
    """Greedy 32 tokens of one prompt with nothing stopping it."""
    prompt = _prompts([7])[0]
    return prompt, _run(engine, [prompt], GREEDY)[0]


# stops ----------------------------------------------------------------------------------------
def test_max_new_tokens_finishes_with_length(engine, reference):
    prompt, ref = reference
    out = _run(engine, [prompt], SamplingParams(max_new_tokens=5, temperature=0))[0]
    assert out.token_ids == ref.token_ids[:5] and out.finish_reason == "length"
    assert out.matched_stop is None


def test_stop_token_id_ends_the_output_and_keeps_the_token(engine, reference):
    prompt, ref = reference
    stop = ref.token_ids[6]
    first = ref.token_ids.index(stop)
    params = SamplingParams(max_new_tokens=32, temperature=0, stop_token_ids=[stop],
                            ignore_eos=True)
    out = _run(engine, [prompt], params)[0]
    assert out.token_ids == ref.token_ids[:first + 1]
    assert (out.finish_reason, out.matched_stop) == ("stop", stop)
    assert out.text == engine.tokenizer.decode(ref.token_ids[:first])


def test_eos_stops_unless_ignore_eos(tiny_qwen3, reference, tmp_path):
    prompt, ref = reference
    eos = ref.token_ids[4]
    first = ref.token_ids.index(eos)
    path = tmp_path / "with-eos"
    shutil.copytree(tiny_qwen3, path)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "eos_token_id": eos}))
    engine = _engine(path)
    stopped = _run(engine, [prompt], SamplingParams(max_new_tokens=32, temperature=0))[0]
    assert stopped.token_ids == ref.token_ids[:first + 1]
    assert (stopped.finish_reason, stopped.matched_stop) == ("stop", eos)
    ignored = _run(engine, [prompt], GREEDY)[0]
    assert ignored.token_ids == ref.token_ids and ignored.finish_reason == "length"


def _ascii_substring(text: str, start: int = 3) -> str:
    for i in range(start, len(text) - 2):
        piece = text[i:i + 2]
        if piece.isascii() and piece.isprintable():
            return piece
    raise AssertionError(f"no printable pair in {text!r}")


def test_stop_string_trims_text_and_stops_at_the_completing_token(engine, reference):
    prompt, ref = reference
    stop = _ascii_substring(ref.text)
    cut = ref.text.index(stop)
    out = _run(engine, [prompt], SamplingParams(max_new_tokens=32, temperature=0,
                                                stop=["\x00never", stop]))[0]
    assert out.text == ref.text[:cut]
    assert (out.finish_reason, out.matched_stop) == ("stop", stop)
    n = len(out.token_ids)
    assert out.token_ids == ref.token_ids[:n]
    assert stop in engine.tokenizer.decode(ref.token_ids[:n])
    assert stop not in engine.tokenizer.decode(ref.token_ids[:n - 1])


def test_streamed_text_never_includes_a_trimmed_stop_string(engine, reference):
    prompt, ref = reference
    stop = _ascii_substring(ref.text, start=6)
    rid = engine.add_request(prompt, SamplingParams(max_new_tokens=32, temperature=0, stop=stop))
    streamed, final = "", None
    while engine.has_unfinished():
        for out in engine.step():
            assert out.rid == rid
            streamed += out.new_text
            final = out
    assert streamed == final.text == ref.text[:ref.text.index(stop)]


# validation and control -----------------------------------------------------------------------
@pytest.mark.parametrize("prompt,params,message", [
    ([], SamplingParams(), "empty"),
    ([1, 256], SamplingParams(), r"\[0, 256\)"),
    ([1, -1], SamplingParams(), "vocab"),
    (list(range(1, 100)), SamplingParams(max_new_tokens=1), "max_model_len=64"),
    ([1] * 40, SamplingParams(max_new_tokens=30), "max_new_tokens <= 24"),
])
def test_bad_requests_are_refused_with_a_message(tiny_qwen3, prompt, params, message):
    engine = _engine(tiny_qwen3, max_model_len=64, kv_cache_bytes=1 << 20)
    with pytest.raises(ValueError, match=message):
        engine.add_request(prompt, params)
    assert not engine.has_unfinished()


def test_request_that_cannot_fit_in_the_whole_pool_is_refused(tiny_qwen3):
    engine = _engine(tiny_qwen3, kv_cache_bytes=5 * 16 * 512, page_size=16)  # 4 usable pages
    with pytest.raises(ValueError, match="kv_cache_bytes"):
        engine.add_request([1] * 40, SamplingParams(max_new_tokens=30))


def test_duplicate_request_id_is_refused(engine):
    engine.add_request([1, 2], SamplingParams(max_new_tokens=1), rid="same")
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request([1, 2], SamplingParams(max_new_tokens=1), rid="same")
    assert engine.abort_request("same")


def test_abort_returns_the_request_and_frees_its_pages(engine):
    a = engine.add_request(_prompts([30])[0], GREEDY)
    b = engine.add_request(_prompts([9])[0], GREEDY)
    engine.step()
    engine.step()
    assert engine.stats().kv_pages_used > 0
    assert engine.abort_request(a) and not engine.abort_request("nope")
    assert engine.flush_cache() is False, "flush is refused while requests run"
    outs = {}
    while engine.has_unfinished():
        for out in engine.step():
            outs.setdefault(out.rid, []).append(out)
    assert outs[a][-1].finish_reason == "abort" and outs[a][-1].finished
    assert len(outs[b][-1].token_ids) == 32
    assert engine.stats().kv_pages_used == 0 and engine.flush_cache() is True


def test_stats_and_server_info_report_the_pool_in_tokens(engine):
    _run(engine, _prompts([3]), SamplingParams(max_new_tokens=2))
    info = engine.server_info()
    stats = engine.stats()
    assert info["kv_cache"]["tokens"] == stats.kv_tokens_total == engine.kv.num_usable_tokens
    assert info["plan"] and info["config"]["model"] == str(engine.config.model)
    assert json.loads(json.dumps(info)) == info, "server_info must be plain JSON"
    assert stats.num_running == stats.num_waiting == 0
    assert stats.generation_tokens > 0 and stats.forward_steps > 0


def test_stats_count_eager_steps_per_phase_and_no_graph_replays(engine):
    before = engine.stats()
    _run(engine, _prompts([4]), SamplingParams(max_new_tokens=3, ignore_eos=True))
    after = engine.stats()
    assert after.eager_steps.get("prefill", 0) == before.eager_steps.get("prefill", 0) + 1
    assert after.eager_steps.get("decode", 0) == before.eager_steps.get("decode", 0) + 2
    assert sum(after.eager_steps.values()) == after.forward_steps
    assert after.graph_replays == {"prefill": 0, "decode": 0, "draft": 0}


# pool exhaustion and determinism -------------------------------------------------------------
MIXED = [5, 23, 1, 40, 12, 17, 33, 8]


def _logprob_params(seeded: bool = False) -> SamplingParams:
    if seeded:
        return SamplingParams(max_new_tokens=24, temperature=0.8, top_p=0.9, seed=42,
                              ignore_eos=True, logprobs=True)
    return SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True, logprobs=True)


def test_exhausted_pool_makes_requests_wait_and_retract_yet_outputs_match(tiny_qwen3):
    prompts = _prompts(MIXED, seed=1)
    roomy = _run(_engine(tiny_qwen3, deterministic=True, page_size=4), prompts, _logprob_params())
    # 16 usable pages of 4 tokens = 64 tokens, for 8 requests of up to 64 tokens (280 in all)
    tight = _engine(tiny_qwen3, deterministic=True, page_size=4, kv_cache_bytes=17 * 4 * 512)
    outs = _run(tight, prompts, _logprob_params())
    stats = tight.stats()
    assert stats.num_retractions > 0 and stats.kv_pages_used == 0
    for a, b in zip(roomy, outs, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_deterministic_logprobs_equal_alone_in_a_batch_and_across_chunk_sizes(tiny_qwen3):
    prompts = _prompts(MIXED, seed=2)
    target = 3  # the 40-token prompt
    for seeded in (False, True):
        params = _logprob_params(seeded)
        alone = _run(_engine(tiny_qwen3, deterministic=True), [prompts[target]], params)[0]
        batch = _run(_engine(tiny_qwen3, deterministic=True, chunked_prefill_size=16),
                     prompts, params)[target]
        rechunked = _run(_engine(tiny_qwen3, deterministic=True, chunked_prefill_size=7),
                         prompts[::-1], params)[len(prompts) - 1 - target]
        assert alone.token_ids == batch.token_ids == rechunked.token_ids
        assert alone.logprobs == batch.logprobs == rechunked.logprobs


def test_without_deterministic_the_same_check_sees_batch_variance(tiny_qwen3):
    """Companion of the test above: shows the setup exercises batch-variant kernels."""
    prompts = _prompts(MIXED, seed=2)
    params = _logprob_params()
    alone = _run(_engine(tiny_qwen3), [prompts[3]], params)[0]
    batch = _run(_engine(tiny_qwen3, chunked_prefill_size=16), prompts, params)[3]
    assert alone.logprobs == pytest.approx(batch.logprobs, abs=1e-4)
    if alone.logprobs == batch.logprobs:
        pytest.skip("the default kernels happen to be batch invariant on this machine")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a CPU-only torch gives")
def test_cuda_device_without_cuda_fails_with_a_clear_error():
    with pytest.raises(ValueError, match="device 'cuda' was asked for, but torch sees no CUDA"):
        Engine(EngineConfig(device="cuda"))
