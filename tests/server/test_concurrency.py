"""Many clients at once: same tokens as alone, and every KV page back when they finish or leave."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
from server_helpers import wait_until_idle

from hinge import SamplingParams
from hinge.server.metrics import parse

NUM_REQUESTS = 64


def _jobs(llm) -> list[tuple[list[int], dict]]:
    rng = random.Random(0)
    words = "the a cat dog sat on mat and ran far away with blue red green sky".split()
    jobs = []
    for i in range(NUM_REQUESTS):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 24)))
        params = {"max_new_tokens": rng.randint(2, 12), "ignore_eos": True}
        if i % 2:  # half sampled with a per-request seed, half greedy
            params |= {"temperature": 0.8, "top_k": 50, "seed": i}
        else:
            params |= {"temperature": 0.0}
        jobs.append((llm.tokenizer.encode(text), params))
    return jobs


async def _stream_one(client: httpx.AsyncClient, ids: list[int], params: dict) -> list[int]:
    last: list[int] = []
    body = {"input_ids": ids, "sampling_params": params, "stream": True}
    async with client.stream("POST", "/generate", json=body) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ids_so_far = json.loads(line[6:])["output_ids"]
            assert ids_so_far[: len(last)] == last, "a stream chunk rewrote earlier tokens"
            last = ids_so_far
    return last


async def _stream_all(server, jobs) -> list[list[int]]:
    limits = httpx.Limits(max_connections=NUM_REQUESTS + 4)
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.headers, timeout=300,
                                 limits=limits) as client:
        return await asyncio.gather(*(_stream_one(client, ids, p) for ids, p in jobs))


def test_64_concurrent_streams_match_solo_runs_and_free_the_pool(server, llm):
    jobs = _jobs(llm)
    got = asyncio.run(_stream_all(server, jobs))
    for i, ((ids, params), tokens) in enumerate(zip(jobs, got, strict=True)):
        alone = llm.generate([ids], SamplingParams(**params))[0]
        assert tokens == alone.token_ids, f"request {i} ({params}) differs from its solo run"
    stats = wait_until_idle(server)
    assert stats["kv_pages_used"] == 0


async def _drop_after(server, body: dict, chunks: int) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.headers,
                                 timeout=60) as client:
        async with client.stream("POST", "/generate", json=body) as resp:
            seen = 0
            async for line in resp.aiter_lines():
                seen += line.startswith("data: ")
                if seen >= chunks:
                    return  # leaving the block closes the connection mid-stream


def _num_aborted(server) -> tuple[int, float]:
    """Aborts as the engine counts them; /metrics must count the same ones."""
    with server.client() as c:
        engine = c.get("/server_info").json()["stats"]["num_aborted"]
        metrics = parse(c.get("/metrics").text)
    exported = metrics.get('hinge:request_success_total{finished_reason="abort"}', 0)
    return engine, exported


def test_clients_that_drop_mid_stream_leave_no_pages_allocated(server):
    before = _num_aborted(server)
    body = {"text": "keep going", "stream": True, "sampling_params": {
        "max_new_tokens": 100, "ignore_eos": True}}

    async def main() -> None:
        await asyncio.gather(*(_drop_after(server, body, chunks=2 + i) for i in range(6)))

    asyncio.run(main())
    stats = wait_until_idle(server, timeout=20)
    assert stats["kv_pages_used"] == 0
    after = _num_aborted(server)
    assert (after[0] - before[0], after[1] - before[1]) == (6, 6)


def test_non_streaming_client_timeout_aborts_its_batch(server):
    before = _num_aborted(server)
    body = {"text": ["slow"] * 4, "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}}
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=0.15) as c:
        try:
            c.post("/generate", json=body)
        except httpx.ReadTimeout:
            pass
    stats = wait_until_idle(server, timeout=20)
    assert stats["kv_pages_used"] == 0
    after = _num_aborted(server)
    assert (after[0] - before[0], after[1] - before[1]) == (4, 4)
