"""Start-up warm-up requests (``hinge.engine.warmup``): they leave no trace in the engine's
counters, pools or prefix cache, and what a client gets afterwards is what it gets without them."""

from __future__ import annotations

import pytest

from hinge.builtin.no_cache import NoCachePolicy
from hinge.config import EngineConfig
from hinge.engine import warmup
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer
from hinge.testing.engine_runs import run_requests

PARAMS = [SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True, logprobs=True),
          SamplingParams(max_new_tokens=6, temperature=0.8, top_p=0.9, top_k=20, seed=3,
                         repetition_penalty=1.2, ignore_eos=True, logprobs=True)]
PROMPTS = [[5, 9, 11, 40, 2, 7, 7, 13], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]]


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def checkpoint(request, tmp_path_factory):
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(f"warmup-{request.param}"),
                                seed=5)
    write_byte_tokenizer(path)
    return path


def _engine(path, mode: str) -> Engine:
    return Engine(EngineConfig(model=str(path), device="cpu", warmup=mode,
                               kv_cache_bytes=64 << 20), progress=False)


def _run(engine: Engine) -> list:
    return [(o.token_ids, o.logprobs) for o in run_requests(engine, PROMPTS, PARAMS)]


def test_auto_warms_up_on_cuda_only_and_on_and_off_mean_what_they_say():
    def cfg(device, mode):
        return EngineConfig(device=device, warmup=mode)

    assert [warmup.enabled(cfg("cpu", m)) for m in ("auto", "on", "off")] == [False, True, False]
    assert [warmup.enabled(cfg("cuda", m)) for m in ("auto", "on", "off")] == [True, True, False]


def test_the_warm_up_steps_cover_every_row_count_variant_triton_specializes_on():
    # Triton compiles an integer argument apart when it is 1 or a multiple of 16; a kernel over a
    # step's rows sees the batched pair's total, so that total must be the ordinary variant (on
    # the H200 a pair of 23 + 9 = 32 left the hybrid's prefill conv to compile on a request)
    def variant(n):
        return "one" if n == 1 else "x16" if n % 16 == 0 else "ordinary"

    steps = [sum(warmup.BATCHED_LENGTHS), *warmup.SOLO_LENGTHS]
    assert sorted(map(variant, steps)) == ["one", "ordinary", "x16"]
    assert all(variant(n) == "ordinary" for n in warmup.BATCHED_LENGTHS)


def test_after_the_warm_up_every_counter_pool_and_the_cache_are_as_at_start(checkpoint):
    engine = _engine(checkpoint, "on")
    stats = engine.stats()
    assert (stats.forward_steps, stats.generation_tokens, stats.num_finished, stats.prompt_tokens) \
        == (0, 0, 0, 0)
    assert stats.eager_steps == {} and stats.kv_pages_used == 0 and stats.kv_pages_cached == 0
    assert stats.prefix_cache["query_tokens"] == 0 and stats.prefix_cache["tree_nodes"] <= 1
    assert stats.prefix_cache["checkpoint_writes"] == {}
    assert engine.kv.allocator.num_used == 0
    if engine.states is not None:
        assert engine.states.num_used == 0 and engine.states.checkpoints.num_used == 0
    assert engine.scheduler.cache is engine.cache  # the real cache is back
    assert not engine.has_unfinished()


def test_a_warmed_up_engine_gives_the_same_tokens_and_logprobs_as_a_cold_one(checkpoint):
    warm, cold = _engine(checkpoint, "on"), _engine(checkpoint, "off")
    assert _run(warm) == _run(cold)


def test_a_warm_up_that_keeps_pages_is_an_error_naming_the_leak(checkpoint, monkeypatch):
    monkeypatch.setattr(NoCachePolicy, "insert", lambda self, tokens, pages, *a, **k: [])
    with pytest.raises(RuntimeError, match=r"warm-up requests kept [1-9]\d* KV pages"):
        _engine(checkpoint, "on")


def test_the_warm_up_runs_alone_each_prompt_length_the_models_kernels_ask_for(checkpoint, monkeypatch):
    # kernels that switch paths above some prompt length (fla's short-prefill switch) ask for a
    # prompt past it, so the other path compiles at start-up too
    from hinge.layers.recurrent_kernels import TorchRecurrentKernels

    engine = _engine(checkpoint, "off")
    model = engine.model
    if hasattr(model, "set_recurrent_kernels"):  # the hybrid: its layers' kernels ask

        class Switching(TorchRecurrentKernels):
            def warmup_prompt_lengths(self):
                return (41, 48)

        assert model.warmup_prompt_lengths() == ()
        model.set_recurrent_kernels(Switching())
    else:  # a dense model asks for nothing; here a stand-in asks
        assert model.warmup_prompt_lengths() == ()
        monkeypatch.setattr(model, "warmup_prompt_lengths", lambda: (41, 48), raising=False)
    assert model.warmup_prompt_lengths() == (41, 48)
    rounds: list[list[int]] = []
    add = engine.add_request

    def spy(prompt, params, rid=None):
        r = int(rid.split("-")[1])
        while len(rounds) <= r:
            rounds.append([])
        rounds[r].append(len(prompt))
        return add(prompt, params, rid=rid)

    monkeypatch.setattr(engine, "add_request", spy)
    warmup.run_warmup(engine)
    assert rounds == [list(warmup.BATCHED_LENGTHS), *([n] for n in warmup.SOLO_LENGTHS), [41], [48]]
    assert engine.kv.allocator.num_used == 0
