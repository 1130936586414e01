"""The app in-process over the fake engine: faults, health, metrics and the schema."""

from __future__ import annotations

import threading

import pytest
from fake_engine import FakeEngine
from fastapi.testclient import TestClient

from hinge.engine.async_engine import AsyncEngine
from hinge.server.app import build_app
from hinge.server.metrics import parse


def client_for(engine: FakeEngine, **kwargs) -> TestClient:
    return TestClient(build_app(AsyncEngine(engine), model_name="fake", **kwargs))


def test_engine_fault_is_500_for_the_running_request_only_and_the_server_recovers():
    engine = FakeEngine(fail_steps=1)
    with client_for(engine) as c:
        bad = c.post("/generate", json={"text": "a", "sampling_params": {"max_new_tokens": 3}})
        assert bad.status_code == 500 and "fake step failure" in bad.json()["error"]["message"]
        good = c.post("/generate", json={"text": "a", "sampling_params": {"max_new_tokens": 3}})
        assert good.status_code == 200 and good.json()["text"] == "bcd"
        assert c.get("/health_generate").status_code == 200
        metrics = parse(c.get("/metrics").text)
    assert metrics["hinge:request_errors_total"] == 1
    assert metrics["hinge:engine_wedged"] == 0


def test_health_generate_is_503_when_the_engine_cannot_produce_a_token():
    engine = FakeEngine()
    engine.hang = threading.Event()
    with client_for(engine, health_timeout_s=0.3) as c:
        resp = c.get("/health_generate")
        wedged = parse(c.get("/metrics").text)["hinge:engine_wedged"]
        engine.hang.set()
        assert wedged == 1
        assert resp.status_code == 503 and "cannot generate" in resp.json()["error"]["message"]
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 200


def test_fault_while_streaming_ends_the_stream_with_an_error_event():
    engine = FakeEngine(fail_steps=1)
    with client_for(engine) as c:
        resp = c.post("/v1/completions", json={"prompt": "a", "max_tokens": 3, "stream": True})
    assert resp.status_code == 200
    assert '"code": 500' in resp.text and resp.text.rstrip().endswith("data: [DONE]")


def test_fault_while_streaming_generate_ends_the_stream_with_an_error_event():
    engine = FakeEngine(fail_steps=1)
    with client_for(engine) as c:
        resp = c.post("/generate", json={"text": "a", "sampling_params": {"max_new_tokens": 3},
                                         "stream": True})
    assert resp.status_code == 200
    assert '"code": 500' in resp.text and resp.text.rstrip().endswith("data: [DONE]")


def test_metrics_count_requests_tokens_and_latencies():
    with client_for(FakeEngine()) as c:
        for n in (2, 3, 4):
            c.post("/generate", json={"text": "a", "sampling_params": {"max_new_tokens": n}})
        m = parse(c.get("/metrics").text)
    assert m['hinge:request_success_total{finished_reason="length"}'] == 3
    assert m["hinge:generation_tokens_total"] == 9
    assert m["hinge:prompt_tokens_total"] == 3
    assert m["hinge:time_to_first_token_seconds_count"] == 3
    assert m['hinge:time_to_first_token_seconds_bucket{le="+Inf"}'] == 3
    assert m["hinge:inter_token_latency_seconds_count"] == 6  # every token after the first
    assert m["hinge:kv_pool_tokens_used"] == 0 and m["hinge:kv_pool_tokens_total"] == 4000
    assert m['hinge:cuda_graph_replays_total{phase="decode"}'] == 0


def test_openai_n_choices_and_unknown_model():
    with client_for(FakeEngine()) as c:
        many = c.post("/v1/completions", json={"prompt": ["a", "k"], "max_tokens": 2, "n": 2})
        unknown = c.post("/v1/completions", json={"model": "gpt-9", "prompt": "a"})
    assert [ch["index"] for ch in many.json()["choices"]] == [0, 1, 2, 3]
    assert [ch["text"] for ch in many.json()["choices"]] == ["bc", "bc", "lm", "lm"]
    assert many.json()["usage"]["prompt_tokens"] == 2
    assert unknown.status_code == 404 and "gpt-9" in unknown.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions",
                                  "/v1/models", "/v1/models/{model_id}", "/health",
                                  "/health_generate", "/server_info", "/v1/plugins", "/version",
                                  "/flush_cache", "/abort_request", "/metrics"])
def test_openapi_schema_lists_every_route(path):
    schema = build_app(AsyncEngine(FakeEngine()), model_name="fake").openapi()
    assert path in schema["paths"]


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "a", "stop": [""]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "stop": ""}),
    ("/generate", {"text": "a", "sampling_params": {"stop": [""]}}),
])
def test_sampling_values_refused_by_sampling_params_are_400_on_every_route(path, body):
    with client_for(FakeEngine()) as c:
        resp = c.post(path, json=body)
    assert resp.status_code == 400 and "stop" in resp.json()["error"]["message"]
