"""Open-loop arrivals: the seeded Poisson schedule, the async sender for a server and the
in-process engine loop, both driven by a fake clock (so nothing here depends on real time)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from hinge.bench.arrivals import poisson_arrivals, send_open_loop
from hinge.bench.offline import bench_hinge


class TestPoissonSchedule:
    def test_schedule_is_seeded_starts_at_zero_and_never_goes_back(self) -> None:
        times = poisson_arrivals(200, 4.0, seed=7)
        assert times == poisson_arrivals(200, 4.0, seed=7)
        assert times != poisson_arrivals(200, 4.0, seed=8)
        assert times[0] == 0.0 and all(b >= a for a, b in zip(times, times[1:], strict=False))

    def test_mean_gap_is_one_over_the_rate_and_gaps_are_exponential(self) -> None:
        """A property of the generated numbers: over 20 000 gaps the mean is within 3% of
        1/rate, and the coefficient of variation of an exponential distribution is 1."""
        gaps = np.diff(poisson_arrivals(20_001, 8.0, seed=0))
        assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)

    def test_infinite_rate_sends_everything_at_once(self) -> None:
        assert poisson_arrivals(5, math.inf, seed=0) == [0.0] * 5

    @pytest.mark.parametrize("rate", [0.0, -1.0])
    def test_a_rate_that_is_not_positive_is_refused_by_name(self, rate: float) -> None:
        with pytest.raises(ValueError, match="--request-rate"):
            poisson_arrivals(3, rate, seed=0)


class FakeAsyncClock:
    """Time moves only when the sender sleeps, after the tasks ready at the old time have run
    (as with ``asyncio.sleep``, which yields to them first)."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)
        self.now += seconds


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


class TestOpenLoopSender:
    def test_requests_go_out_on_schedule_while_earlier_ones_are_still_outstanding(self) -> None:
        async def main() -> tuple[list, list]:
            clock, started = FakeAsyncClock(), []
            release = asyncio.Event()

            async def send(i: int) -> int:
                started.append((i, clock.now))
                await release.wait()  # no request finishes until every one was sent
                return i

            task = asyncio.ensure_future(send_open_loop(
                [0.0, 1.0, 2.5, 4.0], send, clock=clock.time, sleep=clock.sleep))
            await _settle()
            seen = list(started)
            release.set()
            return seen, await task

        seen, results = asyncio.run(main())
        assert seen == [(0, 0.0), (1, 1.0), (2, 2.5), (3, 4.0)]
        assert results == [(0.0, 0), (1.0, 1), (2.5, 2), (4.0, 3)]

    def test_max_concurrency_holds_later_arrivals_until_a_request_finishes(self) -> None:
        async def main() -> tuple[list, list, list, list]:
            clock, started = FakeAsyncClock(), []
            done = [asyncio.Event() for _ in range(4)]

            async def send(i: int) -> int:
                started.append((i, clock.now))
                await done[i].wait()
                return i

            task = asyncio.ensure_future(send_open_loop(
                [0.0, 1.0, 2.0, 3.0], send, max_concurrency=2, clock=clock.time,
                sleep=clock.sleep))
            await _settle()
            capped = list(started)
            done[1].set()
            await _settle()
            after_one = list(started)
            for event in done:
                event.set()
            results = await task
            return capped, after_one, list(started), results

        capped, after_one, final, results = asyncio.run(main())
        assert capped == [(0, 0.0), (1, 1.0)]  # 2 and 3 arrived but both slots are taken
        assert after_one == capped + [(2, 3.0)]  # the freed slot goes to the earliest arrival
        assert [i for i, _ in final] == [0, 1, 2, 3]
        assert [send for send, _ in results] == [0.0, 1.0, 3.0, 3.0]


@dataclass
class FakeOutput:
    """The engine's contract: new tokens every step, the whole list on the final output."""

    rid: str
    new_token_ids: list[int]
    token_ids: list[int] | None
    finished: bool
    finish_reason: str | None = None


@dataclass
class FakeEngine:
    """Each step costs one second of fake time and gives every unfinished request one token."""

    clock: list[float]
    active: dict[str, list] = field(default_factory=dict)  # rid -> [prompt, params, tokens]
    added_at: list[tuple[str, float]] = field(default_factory=list)
    most_unfinished: int = 0

    def add_request(self, prompt: list[int], params) -> str:
        rid = f"r{len(self.added_at)}"
        self.active[rid] = [prompt, params, []]
        self.added_at.append((rid, self.clock[0]))
        self.most_unfinished = max(self.most_unfinished, len(self.active))
        return rid

    def has_unfinished(self) -> bool:
        return bool(self.active)

    def step(self) -> list[FakeOutput]:
        self.clock[0] += 1.0
        outs = []
        for rid, (_, params, tokens) in list(self.active.items()):
            tokens.append(7)
            done = len(tokens) == params.max_new_tokens
            outs.append(FakeOutput(rid, [7], list(tokens) if done else None, done,
                                   "length" if done else None))
            if done:
                del self.active[rid]
        return outs


def _offline(arrivals: list[float], max_concurrency: int | None):
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    engine = FakeEngine(now)
    result = bench_hinge(engine, [[1, 2, 3]] * len(arrivals), 3, arrivals=arrivals,
                         max_concurrency=max_concurrency, clock=lambda: now[0], sleep=sleep,
                         warm_up=False)
    return engine, result


class TestOfflineArrivals:
    def test_requests_join_the_running_engine_when_their_arrival_time_passes(self) -> None:
        engine, result = _offline([0.0, 0.5, 2.5, 10.0], max_concurrency=None)
        # added after the step in which they arrived; r3 after sleeping while the engine idled
        assert engine.added_at == [("r0", 0.0), ("r1", 1.0), ("r2", 3.0), ("r3", 10.0)]
        assert engine.most_unfinished == 2  # open loop: r1 did not wait for r0
        assert [r.send_s for r in result.records] == [0.0, 0.5, 2.5, 10.0]
        assert [r.output_len for r in result.records] == [3, 3, 3, 3]
        assert result.records[1].ttft_s == 1.5  # first token at the step ending at 2.0
        assert result.records[1].latency_s == 3.5
        assert result.outputs == [[7, 7, 7]] * 4

    def test_max_concurrency_caps_unfinished_requests_and_sends_when_a_slot_frees(self) -> None:
        engine, result = _offline([0.0, 0.5, 1.0], max_concurrency=1)
        assert engine.most_unfinished == 1
        assert engine.added_at == [("r0", 0.0), ("r1", 3.0), ("r2", 6.0)]
        assert [r.send_s for r in result.records] == [0.0, 3.0, 6.0]
        assert result.completed == 3 and result.output_tokens == 9

    def test_every_bench_request_skips_detokenization_warm_up_included(self) -> None:
        now = [0.0]
        engine = FakeEngine(now)
        seen = []
        add = engine.add_request
        engine.add_request = lambda prompt, params: (seen.append(params), add(prompt, params))[1]
        bench_hinge(engine, [[1, 2, 3]] * 2, 3, clock=lambda: now[0], sleep=lambda s: None)
        assert len(seen) == 3  # the warm-up request and the two measured ones
        assert all(p.detokenize is False for p in seen)
