"""EngineMonitor over the fake engine, on one thread: which histogram each request moves, when
queue time is taken, how aborts and failed steps are counted. Durations come from a fake clock,
so the values checked are arithmetic, not measurements."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_engine import FakeEngine
from fastapi.testclient import TestClient

from hinge.engine.async_engine import AsyncEngine
from hinge.sampling_params import SamplingParams
from hinge.server import monitor as monitor_module
from hinge.server.app import build_app
from hinge.server.metrics import parse, render
from hinge.server.monitor import EngineMonitor
from hinge.server.server_metrics import ServerMetrics

HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds",
              "time_per_output_token_seconds", "e2e_request_latency_seconds",
              "request_queue_time_seconds")


class FakeClock:
    """``time.perf_counter`` for the monitor: advances only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(monitor_module, "time", SimpleNamespace(perf_counter=fake))
    return fake


def monitored(**kwargs) -> tuple[EngineMonitor, ServerMetrics]:
    metrics = ServerMetrics()
    return EngineMonitor(FakeEngine(**kwargs), metrics, decode_log_interval=0), metrics


def add(mon: EngineMonitor, rid: str, max_new_tokens: int, prompt: str = "ab") -> None:
    mon.add_request([ord(c) for c in prompt], SamplingParams(max_new_tokens=max_new_tokens,
                                                             ignore_eos=True), rid)


def series(metrics: ServerMetrics) -> dict[str, float]:
    return parse(render([metrics.requests, metrics.failed, metrics.prompt_tokens,
                         metrics.generation_tokens, metrics.ttft, metrics.itl, metrics.tpot,
                         metrics.e2e, metrics.queue]))


def count(m: dict[str, float], name: str) -> float:
    return m[f"hinge:{name}_count"]


def test_each_finished_request_moves_each_latency_histogram_once():
    mon, metrics = monitored()
    for rid, n in (("a", 1), ("b", 2), ("c", 3), ("d", 4)):
        add(mon, rid, n)
    while mon.has_unfinished():
        mon.step()
    m = series(metrics)
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
                 "request_queue_time_seconds"):
        assert count(m, name) == 4, name
    assert count(m, "time_per_output_token_seconds") == 3  # "a" has one token: no TPOT
    assert count(m, "inter_token_latency_seconds") == 0 + 1 + 2 + 3
    assert m['hinge:request_success_total{finished_reason="length"}'] == 4
    assert m["hinge:generation_tokens_total"] == 1 + 2 + 3 + 4
    assert m["hinge:prompt_tokens_total"] == 4 * 2


def test_queue_time_is_taken_when_a_request_is_first_scheduled_not_when_added():
    mon, metrics = monitored(max_running=1)
    add(mon, "first", 2)
    add(mon, "second", 2)
    mon.step()
    assert count(series(metrics), "request_queue_time_seconds") == 1  # "second" still waits
    mon.step()  # "first" finishes
    assert count(series(metrics), "request_queue_time_seconds") == 1
    mon.step()
    assert count(series(metrics), "request_queue_time_seconds") == 2


def test_durations_count_from_the_arrival_the_route_hands_over(clock):
    mon, metrics = monitored()
    mon.expect("r", arrival=90.0)  # the route received it at 90, the engine thread adds it at 100
    add(mon, "r", 3)
    clock.now = 101.0  # step 1 starts: scheduled; ends at 102 with the first token
    original_step = mon.engine.step

    def step_taking_one_second():
        clock.now += 1.0
        return original_step()

    mon.engine.step = step_taking_one_second
    mon.step()
    clock.now = 105.0
    mon.step()  # second token at 106
    clock.now = 109.0
    mon.step()  # third token at 110, finished
    m = series(metrics)
    assert m["hinge:request_queue_time_seconds_sum"] == 101.0 - 90.0
    assert m["hinge:time_to_first_token_seconds_sum"] == 102.0 - 90.0
    assert m["hinge:e2e_request_latency_seconds_sum"] == 110.0 - 90.0
    assert m["hinge:time_per_output_token_seconds_sum"] == (110.0 - 102.0) / 2
    assert m["hinge:inter_token_latency_seconds_sum"] == (106.0 - 102.0) + (110.0 - 106.0)


def test_a_failed_submit_leaves_no_arrival_behind(clock):
    mon, _ = monitored()
    mon.expect("r", arrival=50.0)
    mon.unexpect("r", arrival=50.0)
    add(mon, "r", 1)
    assert mon._queued["r"].arrival == clock.now  # its own add time, not the stale arrival


def test_an_abort_the_engine_confirms_counts_once_as_abort_and_moves_no_latency():
    mon, metrics = monitored()
    add(mon, "r", 10)
    mon.step()
    assert mon.abort_request("r") is True
    assert mon.abort_request("r") is False  # already gone: not counted again
    assert mon.abort_request("never-added") is False
    while mon.has_unfinished():
        mon.step()
    m = series(metrics)
    assert m['hinge:request_success_total{finished_reason="abort"}'] == 1
    assert count(m, "e2e_request_latency_seconds") == 0
    assert count(m, "time_per_output_token_seconds") == 0


def test_requests_of_a_failed_step_count_as_errors_not_aborts():
    mon, metrics = monitored(fail_steps=1)
    add(mon, "a", 3)
    add(mon, "b", 3)
    with pytest.raises(RuntimeError, match="fake step failure"):
        mon.step()
    assert mon.abort_request("a") is True and mon.abort_request("b") is True  # as AsyncEngine does
    m = series(metrics)
    assert m["hinge:request_errors_total"] == 2
    assert 'hinge:request_success_total{finished_reason="abort"}' not in m


def test_metrics_endpoint_exports_every_histogram_as_buckets_sum_and_count():
    app = build_app(AsyncEngine(FakeEngine()), model_name="fake")
    with TestClient(app) as c:
        before = parse(c.get("/metrics").text)
        for n in (2, 3):
            c.post("/v1/completions", json={"prompt": "a", "max_tokens": n, "ignore_eos": True})
        text = c.get("/metrics").text
    after = parse(text)
    for name in HISTOGRAMS:
        assert f"# TYPE hinge:{name} histogram" in text
        assert after[f'hinge:{name}_bucket{{le="+Inf"}}'] == after[f"hinge:{name}_count"]
        assert f"hinge:{name}_sum" in after
    moved = {name: count(after, name) - count(before, name) for name in HISTOGRAMS}
    assert moved == {"time_to_first_token_seconds": 2, "inter_token_latency_seconds": 1 + 2,
                     "time_per_output_token_seconds": 2, "e2e_request_latency_seconds": 2,
                     "request_queue_time_seconds": 2}
