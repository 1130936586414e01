"""The results as a table (one column per side) and as one JSON document."""

from __future__ import annotations

import math
from typing import Any

from hinge.bench.result import BenchResult
from hinge.bench.stats import PERCENTILES, latency_summaries

_LATENCIES = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2e_ms", "E2E latency (ms)"))


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "n/a"
    return "inf" if math.isinf(value) else f"{value:.{digits}f}"


def format_table(results: list[BenchResult]) -> str:
    """Counts, throughputs and latency percentiles of each result, side by side; ``n/a`` where a
    value was not measured."""
    summaries = [latency_summaries(r.records) for r in results]
    rows = [("requests completed", [str(r.completed) for r in results]),
            ("requests failed", [str(r.failed) for r in results]),
            ("input tokens", [str(r.input_tokens) for r in results]),
            ("output tokens", [str(r.output_tokens) for r in results]),
            ("wall time (s)", [_fmt(r.wall_s, 3) for r in results]),
            ("request rate asked (req/s)", [_fmt(r.request_rate, 2) for r in results]),
            ("request rate achieved (req/s)", [_fmt(r.achieved_request_rate, 2) for r in results]),
            ("request throughput (req/s)", [_fmt(r.request_throughput, 2) for r in results]),
            ("output tok/s", [_fmt(r.output_tok_s, 1) for r in results]),
            ("total tok/s", [_fmt(r.total_tok_s, 1) for r in results])]
    for key, label in _LATENCIES:
        for stat in ("mean", *(f"p{q}" for q in PERCENTILES)):
            rows.append((f"{stat} {label}", [_fmt(s[key][stat], 2) for s in summaries]))
    if any(r.torch_threads is not None for r in results):
        rows.append(("torch threads", [str(r.torch_threads or "n/a") for r in results]))
    width = max(len(name) for name, _ in rows) + 2
    col = max(16, *(len(r.name) + 2 for r in results))
    lines = [" " * width + "".join(f"{r.name:>{col}}" for r in results)]
    lines += [name.ljust(width) + "".join(f"{v:>{col}}" for v in values) for name, values in rows]
    lines += [f"{r.name}: {r.note}" for r in results if r.note]
    lines += [f"{r.name} error: {e}" for r in results for e in r.errors()]
    return "\n".join(lines)


def to_json(results: list[BenchResult], settings: dict[str, Any],
            summary: dict[str, Any]) -> dict[str, Any]:
    """``{"settings": ..., "results": [...], **summary}``: plain JSON values only."""
    return {"settings": settings, "results": [r.to_dict() for r in results], **summary}
