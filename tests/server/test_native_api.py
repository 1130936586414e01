"""sglang-native /generate and the service routes, over httpx against the real server."""

from __future__ import annotations

import json

import pytest
from server_helpers import wait_until_idle

from hinge import SamplingParams
from hinge.server.metrics import parse

PROMPTS = ["Hello world", "The capital of France is", "1 2 3 4 5"]


def sse_events(text: str) -> list:
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def test_batch_greedy_outputs_equal_llm_generate(server, llm):
    with server.client() as c:
        resp = c.post("/generate", json={
            "text": PROMPTS, "sampling_params": {"max_new_tokens": 16, "temperature": 0}})
    assert resp.status_code == 200, resp.text
    want = llm.generate(PROMPTS, SamplingParams(max_new_tokens=16, temperature=0))
    got = resp.json()
    assert [g["output_ids"] for g in got] == [w.token_ids for w in want]
    assert [g["text"] for g in got] == [w.text for w in want]
    for g, w in zip(got, want, strict=True):
        meta = g["meta_info"]
        assert meta["finish_reason"]["type"] == w.finish_reason
        assert meta["prompt_tokens"] == len(w.prompt_token_ids)
        assert meta["completion_tokens"] == len(w.token_ids)
        assert meta["cached_tokens"] == 0 and isinstance(meta["e2e_latency"], float)  # a time: presence only


def test_input_ids_with_prompt_and_output_logprobs(server, llm):
    ids = llm.tokenizer.encode("Logprobs please")
    with server.client() as c:
        resp = c.post("/generate", json={
            "input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
            "top_logprobs_num": 2, "return_text_in_logprobs": True,
            "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    assert resp.status_code == 200, resp.text
    want = llm.generate([ids], SamplingParams(max_new_tokens=6, temperature=0, logprobs=True,
                                              top_logprobs=2, prompt_logprobs_start=0))[0]
    meta = resp.json()["meta_info"]
    assert [t[1] for t in meta["input_token_logprobs"]] == ids
    assert meta["input_token_logprobs"][0][0] is None
    assert [t[0] for t in meta["input_token_logprobs"][1:]] == pytest.approx(
        want.prompt_logprobs[-(len(ids) - 1):], abs=1e-6)
    out = meta["output_token_logprobs"]
    assert [t[1] for t in out] == want.token_ids
    assert [t[0] for t in out] == pytest.approx(want.logprobs, abs=1e-6)
    assert all(isinstance(t[2], str) for t in out)
    assert [len(row) for row in meta["output_top_logprobs"]] == [2] * len(want.token_ids)


def test_stream_sends_growing_chunks_then_done(server):
    body = {"text": "Stream me", "stream": True, "sampling_params": {
        "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    with server.client() as c:
        plain = c.post("/generate", json={**body, "stream": False}).json()
        resp = c.post("/generate", json=body)
    assert resp.headers["content-type"].startswith("text/event-stream")
    chunks = sse_events(resp.text)
    assert [len(ch["output_ids"]) for ch in chunks] == list(range(1, 9))
    assert chunks[-1]["output_ids"] == plain["output_ids"]
    assert chunks[-1]["text"] == plain["text"]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(ch["meta_info"]["finish_reason"] is None for ch in chunks[:-1])


def test_stop_string_is_trimmed_and_reported(server, llm):
    full = llm.generate(["Hello world"], SamplingParams(max_new_tokens=12, temperature=0))[0]
    stop = full.text[3:6]
    if len(stop.strip()) < 2:
        pytest.skip(f"greedy text {full.text!r} has no usable stop string")
    with server.client() as c:
        got = c.post("/generate", json={"text": "Hello world", "sampling_params": {
            "max_new_tokens": 12, "temperature": 0, "stop": [stop]}}).json()
    assert got["text"] == full.text[: full.text.index(stop)]
    assert got["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}


@pytest.mark.parametrize("body, needle", [
    ({"text": "x", "sampling_params": {"temperature": -0.5}}, "temperature"),
    ({"text": "x", "sampling_params": {"top_p": 0}}, "top_p"),
    ({"text": "x", "sampling_params": {"max_new_tokens": "ten"}}, "max_new_tokens"),
    ({"text": "x", "sampling_params": {"max_tokens": 3}}, "max_tokens"),
    ({"text": "x", "sampling_params": {"max_new_tokens": 100_000}}, "max_new_tokens"),
    ({"text": "x " * 400}, "context"),
    ({"input_ids": [10**6]}, "vocab"),
    ({"input_ids": []}, "empty"),
    ({"text": "x", "input_ids": [1]}, "exactly one"),
    ({"text": ["a", "b"], "sampling_params": [{}]}, "sampling_params"),
])
def test_bad_input_is_400_naming_the_problem(server, body, needle):
    with server.client() as c:
        resp = c.post("/generate", json=body)
    assert resp.status_code == 400, resp.text
    assert needle in resp.json()["error"]["message"]


@pytest.mark.parametrize("raw", [b"{not json", b'{"text": "x", "sampling_params": '
                                 b'{"temperature": NaN}}', b"[1, 2", b"\xff\xfe"])
def test_malformed_or_non_finite_json_is_400(server, raw):
    with server.client() as c:
        resp = c.post("/generate", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text


def test_flush_cache_refused_while_a_request_runs_then_allowed(server):
    """A successful /abort_request after the flush proves the request was running during it."""
    overlapped = False
    with server.client() as c:
        for attempt in range(3):
            rid = f"flush-{attempt}"
            body = {"text": "long", "stream": True, "rid": rid, "sampling_params": {
                "max_new_tokens": 100, "ignore_eos": True}}
            with c.stream("POST", "/generate", json=body) as resp:
                assert resp.status_code == 200, resp.read()
                lines = resp.iter_lines()  # NOTE: keep it: a dropped iterator closes the stream
                next(lines)
                busy = c.post("/flush_cache")
                overlapped = c.post("/abort_request", json={"rid": rid}).json()["aborted"]
            if overlapped:
                assert busy.status_code == 400, busy.text
                assert "running" in busy.json()["error"]["message"]
                break
        assert overlapped, "the request finished before /flush_cache three times"
        wait_until_idle(server)
        assert c.post("/flush_cache").status_code == 200


def test_abort_request_ends_the_stream_with_reason_abort_and_is_counted(server):
    body = {"text": "abort me", "rid": "to-abort", "stream": True, "sampling_params": {
        "max_new_tokens": 100, "ignore_eos": True}}
    with server.client() as c:
        before = parse(c.get("/metrics").text)
        with c.stream("POST", "/generate", json=body) as resp:
            lines = resp.iter_lines()
            next(lines)
            assert c.post("/abort_request", json={"rid": "to-abort"}).json()["aborted"] is True
            rest = "\n".join(lines)
        wait_until_idle(server)
        after = parse(c.get("/metrics").text)
    chunks = sse_events(rest)
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(chunks[-1]["output_ids"]) < 100
    abort = 'hinge:request_success_total{finished_reason="abort"}'
    assert after[abort] - before.get(abort, 0) == 1


def test_latency_histograms_count_every_request(server):
    """vLLM's histograms, named after a hinge: prefix; a batch of 3 moves each count by 3."""
    names = ("time_to_first_token_seconds", "e2e_request_latency_seconds",
             "request_queue_time_seconds", "time_per_output_token_seconds")
    with server.client() as c:
        before = parse(c.get("/metrics").text)
        resp = c.post("/generate", json={"text": PROMPTS, "sampling_params": {
            "max_new_tokens": 4, "temperature": 0, "ignore_eos": True}})
        assert resp.status_code == 200, resp.text
        after = parse(c.get("/metrics").text)
    for name in names:
        key = f"hinge:{name}_count"
        assert after[key] - before[key] == 3, name
        assert after[f'hinge:{name}_bucket{{le="+Inf"}}'] == after[key]
    itl = "hinge:inter_token_latency_seconds_count"
    assert after[itl] - before[itl] == 3 * 3  # every token after each request's first
    length = 'hinge:request_success_total{finished_reason="length"}'
    assert after[length] - before.get(length, 0) == 3


def test_service_routes_answer(server):
    with server.client() as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 200
        info = c.get("/server_info").json()
        plugins = c.get("/v1/plugins").json()
        metrics = c.get("/metrics").text
    assert info["config"]["deterministic"] is True
    assert info["kv_cache"]["tokens"] > 0
    assert set(info["plan"]["graphs"]) == {"prefill", "decode", "draft"}
    assert all(info["plan"]["graphs"][p]["reasons"] for p in ("prefill", "decode"))
    assert any(p["name"] == "hinge" for p in plugins) or plugins
    for series in ("hinge:request_success_total", "hinge:num_requests_running",
                   "hinge:num_requests_waiting", "hinge:kv_cache_usage_perc",
                   "hinge:time_to_first_token_seconds_bucket", "hinge:cache_hit_tokens_total",
                   "hinge:inter_token_latency_seconds_count", "hinge:spec_accept_length",
                   "hinge:cuda_graph_replays_total"):
        assert series in metrics


def test_metrics_prove_steps_ran_eagerly_and_no_graph_replayed_on_cpu(server):
    """/metrics says which path ran: eager steps per phase move, graph replays stay 0 on CPU."""
    with server.client() as c:
        before = parse(c.get("/metrics").text)
        r = c.post("/generate", json={"text": "def f(x):",
                                      "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
        assert r.status_code == 200
        after = parse(c.get("/metrics").text)
    for phase in ("prefill", "decode"):
        key = f'hinge:eager_steps_total{{phase="{phase}"}}'
        assert after[key] > before.get(key, 0), (phase, before.get(key), after.get(key))
    for phase in ("prefill", "decode", "draft"):
        assert after[f'hinge:cuda_graph_replays_total{{phase="{phase}"}}'] == 0
