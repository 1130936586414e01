"""The server's Prometheus series: request/token counters and latency histograms fed by the
AsyncEngine (as its observer), plus gauges read from ``Engine.stats()`` at scrape time."""

from __future__ import annotations

import dataclasses
from typing import Any

from hinge.server.metrics import ITL_BUCKETS, TTFT_BUCKETS, Counter, Gauge, Histogram, render


def stats_dict(stats: Any) -> dict[str, Any]:
    """``Engine.stats()`` as a plain dict, whether it is a dataclass, a pydantic model or a dict."""
    if stats is None:
        return {}
    if hasattr(stats, "to_dict"):
        return dict(stats.to_dict())
    if isinstance(stats, dict):
        return dict(stats)
    if dataclasses.is_dataclass(stats):
        return dataclasses.asdict(stats)
    if hasattr(stats, "model_dump"):
        return stats.model_dump()
    return {k: v for k, v in vars(stats).items() if not k.startswith("_")}


def pick(stats: dict[str, Any], *names: str, default: Any = 0) -> Any:
    for name in names:
        if stats.get(name) is not None:
            return stats[name]
    return default


class ServerMetrics:
    def __init__(self) -> None:
        self.requests = Counter("requests_total", "Finished requests by finish reason.")
        self.failed = Counter("request_errors_total", "Requests failed by an internal engine fault.")
        self.prompt_tokens = Counter("prompt_tokens_total", "Prompt tokens of finished requests.")
        self.generation_tokens = Counter("generation_tokens_total", "Output tokens streamed.")
        self.cached_tokens = Counter("cache_hit_tokens_total", "Prompt tokens served from the prefix cache.")
        self.spec_verify = Counter("spec_verify_total", "Speculative verify steps of finished requests.")
        self.spec_tokens = Counter("spec_tokens_total", "Output tokens of requests that ran speculation.")
        self.spec_accept = Gauge("spec_accept_length", "Mean tokens per verify step (0: no speculation).")
        self.ttft = Histogram("time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.itl = Histogram("inter_token_latency_seconds", "Time between output tokens.", ITL_BUCKETS)
        self.running = Gauge("num_running_reqs", "Requests in the running batch.")
        self.waiting = Gauge("num_queue_reqs", "Requests waiting to be scheduled.")
        self.kv_total = Gauge("kv_pool_tokens_total", "KV pool capacity in tokens.")
        self.kv_used = Gauge("kv_pool_tokens_used", "KV pool tokens allocated.")
        self.kv_pages_used = Gauge("kv_pool_pages_used", "KV pool pages allocated.")
        self.kv_usage = Gauge("kv_pool_usage", "Fraction of the KV pool allocated.")
        self.wedged = Gauge("engine_wedged", "1 when the last engine step failed.")

    # observer interface (called from the engine thread)
    def on_first_token(self, ttft_s: float) -> None:
        self.ttft.observe(ttft_s)

    def on_tokens(self, num_tokens: int, gap_s: float | None) -> None:
        self.generation_tokens.inc(num_tokens)
        if gap_s is not None and num_tokens > 0:
            for _ in range(num_tokens):
                self.itl.observe(gap_s / num_tokens)

    def on_finish(self, output: Any) -> None:
        self.requests.inc(labels={"finish_reason": str(output.finish_reason)})
        self.prompt_tokens.inc(len(output.prompt_token_ids))
        self.cached_tokens.inc(getattr(output, "cached_tokens", 0) or 0)
        verify = getattr(output, "spec_verify_ct", 0) or 0
        if verify:
            self.spec_verify.inc(verify)
            self.spec_tokens.inc(len(output.token_ids))
            self.spec_accept.set(self.spec_tokens.value() / self.spec_verify.value())

    def on_error(self) -> None:
        self.failed.inc()

    def render(self, stats: dict[str, Any], wedged: bool) -> str:
        page_size = pick(stats, "page_size", default=1) or 1
        total = pick(stats, "kv_tokens_total", "kv_total_tokens", "kv_capacity_tokens")
        pages_used = pick(stats, "kv_pages_used", "kv_used_pages")
        used = pick(stats, "kv_tokens_used", "kv_used_tokens", default=pages_used * page_size)
        self.running.set(pick(stats, "num_running", "running"))
        self.waiting.set(pick(stats, "num_waiting", "waiting"))
        self.kv_total.set(total)
        self.kv_used.set(used)
        self.kv_pages_used.set(pages_used)
        self.kv_usage.set(used / total if total else 0.0)
        self.wedged.set(1.0 if wedged else 0.0)
        graph = Gauge("cuda_graph_replays_total", "CUDA graph replays per phase.")
        graph.kind = "counter"
        for phase, count in sorted((pick(stats, "graph_replays", default={}) or {}).items()):
            graph.set(count, {"phase": str(phase)})
        steps = Gauge("engine_steps_total", "Engine steps run.")
        steps.kind = "counter"
        steps.set(pick(stats, "forward_steps", "num_steps"))
        eager = Gauge("eager_steps_total", "Engine steps run eagerly (no CUDA graph), per phase.")
        eager.kind = "counter"
        for phase, count in sorted((pick(stats, "eager_steps", default={}) or {}).items()):
            eager.set(count, {"phase": str(phase)})
        return render([
            self.requests, self.failed, self.prompt_tokens, self.generation_tokens,
            self.cached_tokens, self.spec_verify, self.spec_accept, self.running, self.waiting,
            self.kv_total, self.kv_used, self.kv_pages_used, self.kv_usage, graph, steps, eager,
            self.wedged, self.ttft, self.itl,
        ])
