"""The in-process run: requests go into an ``Engine`` as their arrival times pass.

Between engine steps the loop adds every request whose arrival time has passed (while fewer than
``max_concurrency`` are unfinished, if capped), steps the engine, and sleeps only when the engine
is idle and the next arrival is ahead. A request that arrives during a step "was sent" at its
arrival time, as a server would have queued it then; one held back by the cap was sent when a
slot came free (the semaphore semantics of sglang.bench_serving). Every request produces exactly
``output_len`` tokens (greedy, eos ignored, not detokenized).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from typing import Any

from hinge.bench.result import BenchResult
from hinge.bench.stats import RequestRecord


def bench_hinge(engine: Any, prompts: list[list[int]], output_len: int, *,
                arrivals: list[float] | None = None, max_concurrency: int | None = None,
                request_rate: float = math.inf, progress: Any = None,
                clock: Callable[[], float] = time.perf_counter,
                sleep: Callable[[float], None] = time.sleep, warm_up: bool = True) -> BenchResult:
    """Run ``prompts`` through ``engine`` (``add_request``/``has_unfinished``/``step``) with the
    given send schedule (default: all at once); ``progress`` is a tqdm-like bar or None."""
    from hinge.sampling_params import SamplingParams

    # detokenize=False: the benchmark counts tokens; text would only cost host time (and a
    # random-weight model's ids are beyond the embedded tokenizer)
    params = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True,
                            detokenize=False)
    if warm_up:
        _drain(engine, [prompts[0][:8]], SamplingParams(max_new_tokens=4, temperature=0.0,
                                                        detokenize=False))
    arrivals = arrivals if arrivals is not None else [0.0] * len(prompts)
    records = [RequestRecord(input_len=len(p)) for p in prompts]
    outputs: list[list[int]] = [[] for _ in prompts]
    # NOTE: the time each concurrency slot came free; a request takes the earliest one
    free_slots = [0.0] * max_concurrency if max_concurrency else None
    index_of: dict[str, int] = {}
    next_i = 0
    start = clock()
    while next_i < len(prompts) or engine.has_unfinished():
        now = clock() - start
        while next_i < len(prompts) and arrivals[next_i] <= now and \
                (free_slots is None or free_slots):
            slot = heapq.heappop(free_slots) if free_slots is not None else 0.0
            records[next_i].send_s = max(arrivals[next_i], slot)
            index_of[engine.add_request(list(prompts[next_i]), params)] = next_i
            next_i += 1
        if not engine.has_unfinished():
            sleep(max(arrivals[next_i] - now, 0.0))
            continue
        for out in engine.step():
            i = index_of.get(out.rid)
            if i is None:
                continue
            rec, now = records[i], clock() - start
            if out.new_token_ids and rec.ttft_s is None:
                rec.ttft_s = now - rec.send_s
            if out.finished:
                rec.latency_s, rec.output_len = now - rec.send_s, len(out.token_ids)
                outputs[i] = list(out.token_ids)
                if out.finish_reason not in ("length", "stop"):
                    rec.error = f"finished with {out.finish_reason!r}"
                if free_slots is not None:
                    heapq.heappush(free_slots, now)
                if progress is not None:
                    progress.update(1)
    wall = clock() - start
    return BenchResult("hinge", records, wall, outputs=outputs, request_rate=request_rate,
                       note="continuous batching; requests added as their arrival times pass")


def _drain(engine: Any, prompts: list[list[int]], params: Any) -> None:
    for p in prompts:
        engine.add_request(list(p), params)
    while engine.has_unfinished():
        engine.step()
