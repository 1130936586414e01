"""Invariants 2 and 3 through the engine, on CPU: every sample of the prefill-hit and decode-hit
harnesses hits (the decode hit with a ratio of 1.00: ``cached >= floor((prompt + returned - 1) /
grid) * grid``), and in deterministic mode a hit computes exactly what a cold prefill computes
(output logprobs identical, max abs diff 0), for a dense model and for both hybrid families;
with overlap scheduling, stops found a step late and stop strings too."""

from __future__ import annotations

import pytest
from radix_harness import decode_hit, greedy, prefill_hit, prompts

from hinge import LLM, SamplingParams
from hinge.testing.checkpoints import tiny_checkpoints

PAGE, GRID = 4, 16
ARCHS = ["qwen3", "qwen3_5", "lfm2"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoints(tmp_path_factory.mktemp, seed=3)


def _llm(path, **kw) -> LLM:
    kw.setdefault("deterministic", True)
    return LLM(str(path), page_size=PAGE, track_interval=GRID, chunked_prefill_size=48, **kw)


def _grid(llm) -> int:
    return GRID if llm.engine.states is not None else PAGE


@pytest.mark.parametrize("arch", ARCHS)
def test_every_prefill_hit_sample_hits_and_equals_a_cold_prefill(checkpoint, arch):
    with _llm(checkpoint(arch)) as llm:
        samples = [prefill_hit(llm, p, _grid(llm)) for p in prompts(4, (44, 90), 256, seed=1)]
    for s in samples:
        assert s.floor > 0 and s.cached >= s.floor, f"{len(s.prompt)}-token prompt hit {s.cached} < {s.floor}"
        assert s.warm == s.cold, f"hit != cold prefill: max abs diff {s.max_diff:.3g}"


@pytest.mark.parametrize("overlap", [False, True], ids=["collect", "overlap"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_decode_hit_sample_hits_the_decode_region_and_equals_a_cold_prefill(checkpoint, arch, overlap):
    with _llm(checkpoint(arch)) as llm:
        llm.engine.overlap = overlap  # on CPU every piece of the lagged bookkeeping still runs
        samples = [decode_hit(llm, p, _grid(llm), max_new=n)
                   for p, n in zip(prompts(5, (9, 70), 256, seed=2), (17, 23, 31, 9, 40), strict=True)]
    for s in samples:
        assert s.cached >= s.floor, f"turn 2 hit {s.cached}, the decode region needs {s.floor} (ratio 1.00)"
        assert s.warm == s.cold, f"hit != cold prefill: max abs diff {s.max_diff:.3g}"


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_a_turn_that_stopped_early_is_cached_as_the_client_received_it(checkpoint, arch):
    """Stops found one step late (overlap): the token after the stop was computed on the device,
    yet turn 2 (prompt + returned + suffix) hits up to the decode-region floor and equals cold."""
    with _llm(checkpoint(arch)) as llm:
        llm.engine.overlap = True
        prompt = prompts(1, (30, 31), 256, seed=4)[0]
        free = llm.generate([prompt], greedy(40))[0].token_ids
        stop_at = next(i for i in range(18, 40) if free[i] not in free[:i])
        for params in (greedy(40, stop_token_ids=[free[stop_at]]),
                       SamplingParams(max_new_tokens=stop_at + 1, temperature=0, ignore_eos=True)):
            s = decode_hit(llm, prompt, _grid(llm), params=params)
            assert len(s.prompt) == len(prompt) + stop_at + 1 + 2, "turn 1 returned through the stop"
            assert s.cached >= s.floor and s.warm == s.cold
