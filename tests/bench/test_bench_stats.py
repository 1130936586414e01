"""hinge.bench.stats: percentiles, per-request TPOT and the achieved request rate on known inputs
(no clock involved: every time here is a given number)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from hinge.bench.stats import (
    RequestRecord,
    achieved_request_rate,
    latency_summaries,
    percentile,
    summarize_ms,
)

VALUES = [0.9, 0.1, 0.5, 0.3, 0.7, 2.0, 0.2, 0.4, 1.1, 0.6, 0.8]


@pytest.mark.parametrize("q", [50, 90, 99])
def test_percentile_equals_the_inclusive_quantile_of_statistics(q: int) -> None:
    """numpy's linear interpolation is statistics' 'inclusive' method: an independent oracle."""
    expected = statistics.quantiles(VALUES, n=100, method="inclusive")[q - 1]
    assert percentile(VALUES, q) == pytest.approx(expected, rel=1e-12)


def test_summary_is_in_milliseconds_with_mean_and_three_percentiles() -> None:
    summary = summarize_ms(VALUES)
    assert set(summary) == {"mean", "p50", "p90", "p99"}
    assert summary["mean"] == pytest.approx(1e3 * statistics.fmean(VALUES))
    assert summary["p50"] == pytest.approx(1e3 * statistics.median(VALUES))
    assert summary["p99"] == pytest.approx(1e3 * float(np.percentile(VALUES, 99)))


def test_no_values_give_none_rather_than_an_error() -> None:
    assert percentile([], 50) is None
    assert summarize_ms([]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_tpot_spreads_the_time_after_the_first_token_over_the_remaining_tokens() -> None:
    assert RequestRecord(10, output_len=5, ttft_s=0.2, latency_s=1.0).tpot_s == pytest.approx(0.2)
    assert RequestRecord(10, output_len=1, ttft_s=0.2, latency_s=0.2).tpot_s is None
    assert RequestRecord(10, output_len=5, ttft_s=None, latency_s=1.0).tpot_s is None


def test_failed_requests_are_left_out_of_the_latency_summaries() -> None:
    records = [RequestRecord(4, output_len=3, ttft_s=0.1, latency_s=0.5),
               RequestRecord(4, output_len=3, ttft_s=0.3, latency_s=0.9),
               RequestRecord(4, error="HTTP 400: too long")]
    s = latency_summaries(records)
    assert s["ttft_ms"]["mean"] == pytest.approx(200.0)
    assert s["tpot_ms"]["p50"] == pytest.approx(1e3 * statistics.median([0.2, 0.3]))
    assert s["e2e_ms"]["p99"] == pytest.approx(1e3 * float(np.percentile([0.5, 0.9], 99)))


def test_achieved_rate_counts_send_intervals_between_the_first_and_last_send() -> None:
    records = [RequestRecord(1, send_s=t) for t in (0.0, 0.5, 1.5, 2.0)]
    assert achieved_request_rate(records) == pytest.approx(3 / 2.0)
    assert achieved_request_rate([RequestRecord(1, send_s=0.0)] * 3) is None  # all at once
    assert achieved_request_rate([RequestRecord(1)]) is None
