"""``hinge bench --url``: benchmark a running server with a streaming async HTTP client (httpx).

Two APIs, as sglang.bench_serving's ``sglang`` and ``sglang-oai`` backends and
``vllm bench serve`` speak them:

- ``native``: ``POST /generate`` with ``input_ids``, ``sampling_params`` (``max_new_tokens``,
  ``temperature`` 0, ``ignore_eos``) and ``stream``; each event carries the text and
  ``meta_info`` so far (``completion_tokens``, ``prompt_tokens``).
- ``openai``: ``POST /v1/completions`` with ``prompt`` as a list of token ids, ``max_tokens``,
  ``ignore_eos``, ``stream`` and ``stream_options.include_usage``; the last event holds ``usage``.

Prompts go as token ids, so their lengths are exact. A request's time to first token is the time
to its first non-empty streamed chunk: one with text, or (native) with a completion token count
above zero. Token counts come from the server (``meta_info``/``usage``) where it gives them.
A request fails on a non-200 answer, an error event, a stream without ``[DONE]`` or a transport
error; failures are counted and their first messages reported, never retried.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx

from hinge.bench.arrivals import send_open_loop
from hinge.bench.result import BenchResult
from hinge.bench.stats import RequestRecord

BACKENDS = ("native", "openai")


@dataclass
class ServerTarget:
    """Where and how to send: base URL, API, bearer token, model name (openai)."""

    url: str
    backend: str = "native"
    api_key: str | None = None
    model: str | None = None
    timeout_s: float = 600.0

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, max_connections: int | None = None) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=None)
        return httpx.AsyncClient(base_url=self.url.rstrip("/"), headers=self.headers,
                                 timeout=self.timeout_s, limits=limits)


def server_info(target: ServerTarget) -> dict[str, Any]:
    """The server's ``/server_info`` (its model path and vocabulary), or ``{}`` when it has none;
    raises ValueError naming the URL when nothing answers there."""
    try:
        resp = httpx.get(target.url.rstrip("/") + "/server_info", headers=target.headers,
                         timeout=30)
    except httpx.HTTPError as exc:
        raise ValueError(f"cannot reach a server at {target.url} ({type(exc).__name__}: {exc}); "
                         "start one with `hinge serve` or fix --url") from None
    if resp.status_code in (401, 403):
        raise ValueError(f"{target.url} refused the request ({resp.status_code}); pass its key "
                         "with --api-key or HINGE_API_KEY")
    return resp.json() if resp.status_code == 200 else {}


def first_model_name(target: ServerTarget) -> str:
    """The first model ``/v1/models`` lists (the name OpenAI requests must carry)."""
    resp = httpx.get(target.url.rstrip("/") + "/v1/models", headers=target.headers, timeout=30)
    if resp.status_code != 200 or not resp.json().get("data"):
        raise ValueError(f"{target.url}/v1/models answered {resp.status_code}; the openai "
                         "backend needs it to name the model")
    return resp.json()["data"][0]["id"]


def request_body(target: ServerTarget, prompt: list[int], output_len: int) -> tuple[str, dict]:
    """The route and JSON body of one greedy streamed request of exactly ``output_len`` tokens."""
    if target.backend == "native":
        return "/generate", {"input_ids": prompt, "stream": True, "sampling_params": {
            "max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}}
    return "/v1/completions", {
        "model": target.model, "prompt": prompt, "max_tokens": output_len, "temperature": 0.0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def send_request(client: httpx.AsyncClient, target: ServerTarget, prompt: list[int],
                       output_len: int) -> tuple[RequestRecord, list[int]]:
    """Send one request and time it; returns its record and (native) its output token ids."""
    route, body = request_body(target, prompt, output_len)
    rec = RequestRecord(input_len=len(prompt))
    chunks, output_ids, done = 0, [], False
    start = time.perf_counter()
    try:
        async with client.stream("POST", route, json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                rec.error = f"HTTP {resp.status_code}: {text[:200]}"
                return rec, []
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    rec.error = f"error event: {str(event['error'])[:200]}"
                    return rec, []
                if _read_event(target.backend, event, rec, output_ids) and rec.ttft_s is None:
                    rec.ttft_s = time.perf_counter() - start
                chunks += 1
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
        return rec, []
    rec.latency_s = time.perf_counter() - start
    if not done:
        rec.error = "the stream ended without [DONE]"
    elif rec.output_len == 0:
        rec.output_len = chunks  # no counts from the server: one token per chunk
    return rec, output_ids


def _read_event(backend: str, event: dict[str, Any], rec: RequestRecord,
                output_ids: list[int]) -> bool:
    """Take the counts ``event`` gives into ``rec``; True when it carries generated output."""
    if backend == "native":
        meta = event.get("meta_info") or {}
        rec.input_len = meta.get("prompt_tokens", rec.input_len)
        rec.output_len = meta.get("completion_tokens", rec.output_len)
        output_ids[:] = event.get("output_ids") or output_ids
        return bool(event.get("text")) or rec.output_len > 0
    usage = event.get("usage")
    if usage:
        rec.input_len = usage.get("prompt_tokens", rec.input_len)
        rec.output_len = usage.get("completion_tokens", rec.output_len)
    choices = event.get("choices") or []
    return bool(choices and choices[0].get("text"))


async def bench_server(target: ServerTarget, prompts: list[list[int]], output_len: int, *,
                       arrivals: list[float] | None = None, max_concurrency: int | None = None,
                       request_rate: float = math.inf, progress: Any = None,
                       warm_up: bool = True) -> BenchResult:
    """Send ``prompts`` to the server on the open-loop schedule ``arrivals`` (default: all at
    once), at most ``max_concurrency`` in flight if given; one warm-up request first."""
    arrivals = arrivals if arrivals is not None else [0.0] * len(prompts)
    async with target.client() as client:
        if warm_up:
            rec, _ = await send_request(client, target, prompts[0][:8], 4)
            if not rec.ok:
                raise ValueError(f"the warm-up request to {target.url} failed: {rec.error}")

        async def send(i: int) -> tuple[RequestRecord, list[int]]:
            result = await send_request(client, target, prompts[i], output_len)
            if progress is not None:
                progress.update(1)
            return result

        start = time.perf_counter()
        sent = await send_open_loop(arrivals, send, max_concurrency=max_concurrency)
        wall = time.perf_counter() - start
    records = []
    for send_s, (rec, _) in sent:
        rec.send_s = send_s
        records.append(rec)
    return BenchResult(f"server:{target.backend}", records, wall,
                       outputs=[ids for _, (_, ids) in sent], request_rate=request_rate,
                       note=f"{target.url} ({target.backend} API, streamed); TTFT = first "
                       "non-empty chunk")
