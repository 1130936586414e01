"""AsyncEngine over the fake engine: streaming, aborts, and surviving a failing step."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fake_engine import FakeEngine

from hinge.engine.async_engine import AsyncEngine, EngineError
from hinge.sampling_params import SamplingParams


def run(coro_fn, engine: FakeEngine | None = None):
    aeng = AsyncEngine(engine or FakeEngine())
    aeng.start()
    try:
        return asyncio.run(coro_fn(aeng))
    finally:
        aeng.stop()


async def collect(aeng, prompt, **params):
    return [out async for out in aeng.generate(prompt, SamplingParams(**params))]


def test_generate_streams_one_output_per_step_and_ends_finished():
    outs = run(lambda a: collect(a, [10], max_new_tokens=4))
    assert [o.new_token_ids for o in outs] == [[11], [12], [13], [14]]
    assert [o.finished for o in outs] == [False, False, False, True]
    assert outs[-1].finish_reason == "length"


def test_concurrent_requests_each_get_only_their_own_tokens():
    async def main(aeng):
        return await asyncio.gather(*(collect(aeng, [p], max_new_tokens=3 + p % 3)
                                      for p in range(20, 40)))

    for p, outs in zip(range(20, 40), run(main), strict=True):
        assert outs[-1].token_ids == list(range(p + 1, p + 4 + p % 3))


def test_add_request_value_error_reaches_the_caller_and_leaves_nothing_behind():
    engine = FakeEngine(max_model_len=8)

    async def main(aeng):
        with pytest.raises(ValueError, match="max_model_len"):
            await aeng.submit([1, 2, 3], SamplingParams(max_new_tokens=10))
        return aeng.num_active

    assert run(main, engine) == 0 and not engine.reqs


def test_duplicate_rid_is_refused_while_the_first_runs():
    engine = FakeEngine()
    engine.hang = threading.Event()  # the first step waits, so "same" stays running

    async def main(aeng):
        first = await aeng.submit([1], SamplingParams(max_new_tokens=50), rid="same")
        with pytest.raises(ValueError, match="already running"):
            await aeng.submit([1], SamplingParams(max_new_tokens=5), rid="same")
        first.abort()
        engine.hang.set()

    run(main, engine)


def test_failing_step_fails_running_requests_and_the_loop_keeps_serving():
    engine = FakeEngine(fail_steps=1)  # add_request still works; the first step raises

    async def main(aeng):
        handle = await aeng.submit([5], SamplingParams(max_new_tokens=3))
        with pytest.raises(EngineError, match="fake step failure"):
            async for _ in handle:
                pass
        assert aeng.wedged and "fake step failure" in aeng.last_error
        after = await collect(aeng, [7], max_new_tokens=2)
        return after, aeng.wedged

    after, wedged = run(main, engine)
    assert after[-1].token_ids == [8, 9] and not wedged
    assert not engine.reqs


def test_breaking_out_of_generate_aborts_the_request_in_the_engine():
    engine = FakeEngine()

    async def main(aeng):
        agen = aeng.generate([1], SamplingParams(max_new_tokens=100))
        async for _ in agen:
            break
        await agen.aclose()
        await aeng.call(lambda: None)  # the abort was queued before this call
        return aeng.num_active

    assert run(main, engine) == 0 and not engine.reqs


def test_abort_by_id_ends_the_stream_as_aborted():
    async def main(aeng):
        handle = await aeng.submit([1], SamplingParams(max_new_tokens=100), rid="r")
        seen = 0
        async for _ in handle:
            seen += 1
            if seen == 2:
                assert await aeng.abort("r") is True
        return handle.aborted, seen

    aborted, seen = run(main, FakeEngine(step_delay=0.005))
    assert aborted and seen < 100
