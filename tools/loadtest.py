"""Load a running hinge server: N streaming completions at concurrency C.

    hinge serve &                     # the embedded default model on 127.0.0.1:30000
    python tools/loadtest.py -n 200 -c 16 --max-tokens 32

Reports request and output-token throughput, time to first token (p50/p99), end-to-end latency
(p50/p99) and the number of failed requests (non-200, error events, or a stream without
[DONE]). Prompts are random words of a length drawn per request (seeded), so runs repeat.
Exits 1 if any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass

import httpx

WORDS = ("the a cat dog sat on mat and ran far away with blue red green sky river stone "
         "light night day moon sun tree house road city music").split()


@dataclass
class Result:
    ok: bool
    ttft: float | None = None
    latency: float = 0.0
    completion_tokens: int = 0
    error: str = ""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def one_request(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int,
                      temperature: float) -> Result:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "temperature": temperature, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, tokens, done = None, 0, False
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                return Result(False, error=f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                event = json.loads(line[6:])
                if "error" in event:
                    return Result(False, error=str(event["error"])[:200])
                if event.get("choices") and ttft is None:
                    ttft = time.perf_counter() - start
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
    except httpx.HTTPError as exc:
        return Result(False, error=f"{type(exc).__name__}: {exc}")
    if not done:
        return Result(False, error="stream ended without [DONE]")
    return Result(True, ttft, time.perf_counter() - start, tokens)


async def run(args: argparse.Namespace) -> dict:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=args.concurrency + 4)
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=args.timeout,
                                 limits=limits) as client:
        model = args.model or (await client.get("/v1/models")).json()["data"][0]["id"]
        rng = random.Random(args.seed)
        prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*args.prompt_words)))
                   for _ in range(args.num_requests)]
        gate = asyncio.Semaphore(args.concurrency)

        async def gated(prompt: str) -> Result:
            async with gate:
                return await one_request(client, model, prompt, args.max_tokens, args.temperature)

        start = time.perf_counter()
        results = await asyncio.gather(*(gated(p) for p in prompts))
        wall = time.perf_counter() - start
    good = [r for r in results if r.ok]
    ttfts = [r.ttft for r in good if r.ttft is not None]
    lats = [r.latency for r in good]
    tokens = sum(r.completion_tokens for r in good)
    return {
        "model": model, "num_requests": args.num_requests, "concurrency": args.concurrency,
        "max_tokens": args.max_tokens, "wall_s": round(wall, 3),
        "failures": len(results) - len(good),
        "request_throughput_per_s": round(len(good) / wall, 3),
        "output_token_throughput_per_s": round(tokens / wall, 2),
        "completion_tokens": tokens,
        "ttft_p50_ms": round(1000 * percentile(ttfts, 50), 1),
        "ttft_p99_ms": round(1000 * percentile(ttfts, 99), 1),
        "latency_p50_ms": round(1000 * percentile(lats, 50), 1),
        "latency_p99_ms": round(1000 * percentile(lats, 99), 1),
        "mean_latency_ms": round(1000 * statistics.fmean(lats), 1) if lats else None,
        "errors": sorted({r.error for r in results if not r.ok})[:5],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("-n", "--num-requests", type=int, default=100)
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt-words", type=int, nargs=2, default=(4, 64), metavar=("MIN", "MAX"))
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--model", help="model name (default: the first of /v1/models)")
    parser.add_argument("--api-key")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>30}: {value}")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
