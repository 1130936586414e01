"""Benchmark points and the order in which the sides run them.

A ``Point`` is one measurement: its prompts, their send schedule, the concurrency cap (hinge)
and the batch size (transformers). The plain run is one point; ``--concurrency-sweep 1,8,64``
is one point per concurrency C, each sending ``C x --sweep-rounds`` prompts at once with at most
C in flight, transformers generating them in batches of C.

``run_points`` runs every side at every point ``repeat`` times. On the CPU the sides alternate
run by run, so a burst of load from other processes hits both alike; on a GPU the sides run one
after the other (each side's model is built, run at every point, and freed), since two models
with their caches may not fit on one card together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hinge.bench.result import BenchResult


@dataclass
class Point:
    """One measurement: ``prompts`` sent at ``arrivals`` (None: all at once), at most
    ``concurrency`` in flight (None: no cap); transformers runs them ``hf_batch_size`` per
    ``generate`` call (0: all in one batch)."""

    prompts: list[list[int]]
    concurrency: int | None = None
    arrivals: list[float] | None = None
    request_rate: float = math.inf
    hf_batch_size: int = 0


def parse_concurrencies(text: str) -> list[int]:
    """``"1,8,64"`` -> ``[1, 8, 64]`` (sorted, distinct); ValueError names
    ``--concurrency-sweep``."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--concurrency-sweep must be integers separated by commas (e.g. "
                         f"1,8,64), got {text!r}") from None
    if not values or values[0] < 1:
        raise ValueError(f"--concurrency-sweep needs concurrencies >= 1, got {text!r}")
    return values


def sweep_points(prompts: list[list[int]], concurrencies: list[int], rounds: int) -> list[Point]:
    """One point per concurrency C: the first ``C * rounds`` prompts (cycling through
    ``prompts`` if it holds fewer), all sent at once, at most C in flight."""
    points = []
    for c in concurrencies:
        mine = [prompts[i % len(prompts)] for i in range(c * rounds)]
        points.append(Point(mine, concurrency=c, hf_batch_size=c))
    return points


def run_points(sides: list[Any], points: list[Point], *, output_len: int, repeat: int,
               sequential: bool, before_run: Callable[[], None] = lambda: None,
               progress: Callable[[str, int], Any] | None = None
               ) -> list[dict[str, list[BenchResult]]]:
    """Every side's results at every point: ``[{side name: [one per repeat]}]`` in point
    order. ``sides`` open/run/close (``hinge.bench.sides``); ``before_run`` is called before
    each run (the thread count); ``progress(desc, total)`` makes a bar (a context manager)."""
    results: list[dict[str, list[BenchResult]]] = [{s.name: [] for s in sides} for _ in points]

    def one(side: Any, i: int, k: int) -> None:
        before_run()
        point = points[i]
        desc = f"{side.name}{_label(point, len(points))} {k + 1}/{repeat}"
        if progress is None:
            results[i][side.name].append(side.run(point, output_len))
            return
        with progress(desc, len(point.prompts)) as bar:
            results[i][side.name].append(side.run(point, output_len, progress=bar))

    if sequential:
        for side in sides:
            side.open()
            try:
                for i in range(len(points)):
                    for k in range(repeat):
                        one(side, i, k)
            finally:
                side.close()
        return results
    try:
        for side in sides:
            side.open()
        for i in range(len(points)):
            for k in range(repeat):  # alternate the sides so load bursts hit both alike
                for side in sides:
                    one(side, i, k)
    finally:
        for side in sides:
            side.close()
    return results


def _label(point: Point, num_points: int) -> str:
    return f" C={point.concurrency}" if num_points > 1 else ""
