"""The guards and the shutdown: API key (401), body limit (413), SIGTERM exits 0 cleanly."""

from __future__ import annotations

import json
import signal
import threading

import httpx
import pytest
from server_helpers import MAX_REQUEST_BYTES, ServerProcess


@pytest.mark.parametrize("path, method", [
    ("/generate", "POST"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"),
    ("/metrics", "GET"), ("/server_info", "GET"), ("/health_generate", "GET"),
    ("/flush_cache", "POST"), ("/openapi.json", "GET"),
])
def test_every_route_but_health_needs_the_api_key(server, path, method):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": server.api_key}):
        resp = httpx.request(method, server.base_url + path, headers=headers, json={})
        assert resp.status_code == 401, (path, headers, resp.text)
        assert "API key" in resp.json()["error"]["message"]
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_bodies_over_the_limit_are_413_by_content_length_and_by_chunked_stream(server):
    big = json.dumps({"text": "x" * MAX_REQUEST_BYTES}).encode()
    with server.client() as c:
        declared = c.post("/generate", content=big, headers={"content-type": "application/json"})
        chunked = c.post("/generate", content=iter([big[:1000], big[1000:]]),
                         headers={"content-type": "application/json"})
        ok = c.post("/generate", json={"text": "small", "sampling_params": {"max_new_tokens": 1}})
    assert declared.status_code == 413 and "limit" in declared.json()["error"]["message"]
    assert chunked.status_code == 413, chunked.text
    assert ok.status_code == 200


def test_sigterm_finishes_the_in_flight_stream_and_exits_zero(model_dir, tmp_path):
    proc = ServerProcess(model_dir, tmp_path, api_key=None)
    first_chunk = threading.Event()
    lines: list[str] = []

    def client() -> None:
        body = {"text": "bye", "stream": True, "sampling_params": {
            "max_new_tokens": 30, "ignore_eos": True}}
        with httpx.stream("POST", proc.base_url + "/generate", json=body, timeout=60) as resp:
            for line in resp.iter_lines():
                lines.append(line)
                first_chunk.set()

    reader = threading.Thread(target=client)
    reader.start()
    try:
        assert first_chunk.wait(60), proc.log()
        proc.proc.send_signal(signal.SIGTERM)
        reader.join(60)
        code = proc.proc.wait(60)
    finally:
        proc.stop()
    assert code == 0, proc.log()[-3000:]
    events = [ln[6:] for ln in lines if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    final = json.loads(events[-2])
    assert final["meta_info"]["finish_reason"]["type"] in ("length", "abort")
    assert "Finished server process" in proc.log()
    with pytest.raises(httpx.ConnectError):
        httpx.get(proc.base_url + "/health", timeout=2)


def test_server_binds_loopback_only_by_default(server):
    assert f"Uvicorn running on http://127.0.0.1:{server.port}" in server.log()
