"""When requests are sent: a seeded Poisson schedule, and the open-loop sender for a server.

Open loop, as sglang.bench_serving and ``vllm bench serve`` send: request ``i`` goes out at its
scheduled time whatever is still outstanding; only ``max_concurrency`` (a semaphore each request
takes before it is sent) can hold it back. The clock and the sleep are parameters so that tests
can drive the sender with a fake clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def poisson_arrivals(num: int, rate: float, seed: int) -> list[float]:
    """Send times in seconds from the start: the first at 0, then exponential gaps of mean
    ``1 / rate`` (a Poisson process) from a generator seeded with ``seed``; all 0 for an
    infinite rate."""
    if not rate > 0:
        raise ValueError(f"--request-rate must be > 0 requests/s (or inf), got {rate}")
    if math.isinf(rate) or num == 0:
        return [0.0] * num
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=num - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


async def send_open_loop(arrivals: list[float], send: Callable[[int], Awaitable[T]], *,
                         max_concurrency: int | None = None,
                         clock: Callable[[], float] = time.perf_counter,
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                         ) -> list[tuple[float, T]]:
    """Call ``send(i)`` for request ``i`` at ``arrivals[i]`` seconds after the start, never waiting
    for earlier requests (at most ``max_concurrency`` in flight at once, if given). Returns
    ``(send time from the start, result)`` per request, in request order."""
    start = clock()
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(i: int) -> tuple[float, T]:
        if gate is None:
            return clock() - start, await send(i)
        async with gate:
            return clock() - start, await send(i)

    tasks: list[asyncio.Task] = []
    try:
        for i, at in enumerate(arrivals):
            delay = at - (clock() - start)
            if delay > 0:
                await sleep(delay)
            tasks.append(asyncio.ensure_future(one(i)))
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
