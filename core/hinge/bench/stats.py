"""Per-request measurements and their summaries: mean and p50/p90/p99, as sglang and vLLM report.

A request's time to first token (TTFT) and end-to-end latency run from when it was sent (for the
offline engine: when it arrived and a concurrency slot was free); its time per output token
(TPOT) is ``(latency - ttft) / (output_len - 1)``, defined for two or more output tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass
class RequestRecord:
    """One request as the benchmark saw it; times in seconds."""

    input_len: int
    output_len: int = 0
    send_s: float = 0.0  #: when it was sent, from the start of the run
    ttft_s: float | None = None
    latency_s: float = 0.0
    error: str = ""  #: empty when the request succeeded

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.output_len < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_len - 1)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile with linear interpolation (``numpy.percentile``'s default, as
    sglang.bench_serving uses); None for no values."""
    return float(np.percentile(values, q)) if values else None


def summarize_ms(values_s: list[float]) -> dict[str, float | None]:
    """``{"mean", "p50", "p90", "p99"}`` of durations in seconds, in milliseconds."""
    ms = [1e3 * v for v in values_s]
    summary: dict[str, float | None] = {"mean": float(np.mean(ms)) if ms else None}
    summary |= {f"p{q}": percentile(ms, q) for q in PERCENTILES}
    return summary


def latency_summaries(records: list[RequestRecord]) -> dict[str, dict[str, float | None]]:
    """TTFT, TPOT and end-to-end latency summaries (ms) over the successful requests."""
    good = [r for r in records if r.ok]
    return {
        "ttft_ms": summarize_ms([r.ttft_s for r in good if r.ttft_s is not None]),
        "tpot_ms": summarize_ms([t for r in good if (t := r.tpot_s) is not None]),
        "e2e_ms": summarize_ms([r.latency_s for r in good]),
    }


def achieved_request_rate(records: list[RequestRecord]) -> float | None:
    """Requests per second as actually sent: (n - 1) send intervals over the span from the first
    send to the last; None when fewer than two requests or all were sent at the same instant."""
    sends = sorted(r.send_s for r in records)
    if len(sends) < 2 or sends[-1] <= sends[0]:
        return None
    return (len(sends) - 1) / (sends[-1] - sends[0])
