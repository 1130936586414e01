"""The radix cache through the HTTP server: 200 streamed requests over a hybrid model, sharing
prefixes (system prompts, earlier prompts resent with a new suffix), some of them disconnected at
random mid-stream. Afterwards no KV page and no state slot is held but by the cache, the cache
hit the shared prefixes, /metrics carries the cache series, and a flush gives every page and
checkpoint slot back."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))

from server_helpers import ServerProcess, wait_until_idle  # noqa: E402

from hinge.server.metrics import parse  # noqa: E402
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer  # noqa: E402

NUM_REQUESTS = 200


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = make_tiny_checkpoint("qwen3_5", tmp_path_factory.mktemp("radix-server"), seed=4)
    write_byte_tokenizer(path)
    proc = ServerProcess(path, tmp_path_factory.mktemp("radix-server-logs"), "--cache", "radix",
                         "--page-size", "4", "--max-running-requests", "12", api_key=None)
    yield proc
    assert proc.stop() == 0, proc.log()[-3000:]


def _jobs() -> list[tuple[list[int], dict, int | None]]:
    """(input ids, sampling params, chunks to read before disconnecting or None)."""
    rng = random.Random(1)
    systems = [[rng.randrange(2, 250) for _ in range(rng.randrange(20, 60))] for _ in range(4)]
    turns: list[list[int]] = []
    jobs = []
    for _ in range(NUM_REQUESTS):
        if turns and rng.random() < 0.3:
            ids = rng.choice(turns) + [rng.randrange(2, 250) for _ in range(3)]
        else:
            ids = rng.choice(systems) + [rng.randrange(2, 250) for _ in range(rng.randrange(1, 12))]
        params = {"max_new_tokens": rng.randint(3, 14), "temperature": 0, "ignore_eos": True}
        jobs.append((ids[:100], params, rng.randrange(1, 4) if rng.random() < 0.3 else None))
        turns.append(ids[:80])
    return jobs


async def _one(client: httpx.AsyncClient, ids, params, cut) -> int | None:
    body = {"input_ids": ids, "sampling_params": params, "stream": True}
    chunks, cached = 0, None
    async with client.stream("POST", "/generate", json=body) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks += 1
            cached = json.loads(line[6:])["meta_info"].get("cached_tokens", cached)
            if cut is not None and chunks >= cut:
                return None  # NOTE: leaves the `async with`, closing the connection mid-stream
    return cached


async def _run_all(server, jobs) -> list[int | None]:
    limits = httpx.Limits(max_connections=24)
    sem = asyncio.Semaphore(24)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=300, limits=limits) as client:
        async def bounded(job):
            async with sem:
                return await _one(client, *job)

        return await asyncio.gather(*(bounded(j) for j in _jobs()))


def test_200_requests_with_random_disconnects_leak_no_page_and_no_state_slot(server):
    results = asyncio.run(_run_all(server, _jobs()))
    finished = [c for c in results if c is not None]
    assert len(finished) < NUM_REQUESTS, "some streams must have been cut"
    stats = wait_until_idle(server, timeout=60)
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        info = c.get("/server_info").json()
        metrics = parse(c.get("/metrics").text)
        cache = info["stats"]["prefix_cache"]
        pool = info["state_pool"]
        assert stats["kv_pages_used"] == 0 and pool["slots_used"] == 0, "a request kept its page or slot"
        assert pool["checkpoint_slots_used"] == cache["tree_checkpoints"], "a checkpoint slot leaked"
        assert cache["hit_tokens"] > 0 and sum(finished) > 0, "shared prefixes must hit"
        assert cache["checkpoints_unwritten"] == 0
        assert metrics["hinge:prefix_cache_hits_total"] == cache["hit_tokens"]
        assert metrics["hinge:prefix_cache_tree_tokens"] == cache["tree_tokens"] > 0
        assert metrics['hinge:checkpoint_writes_total{path="eager",phase="prefill"}'] > 0
        assert c.post("/flush_cache").status_code == 200
        after = c.get("/server_info").json()
    assert after["stats"]["prefix_cache"]["tree_tokens"] == 0
    assert after["state_pool"]["checkpoint_slots_used"] == 0
    assert after["stats"]["kv_pages_used"] == 0 and after["stats"]["kv_pages_cached"] == 0
