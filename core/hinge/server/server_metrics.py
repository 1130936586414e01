"""The server's Prometheus series: request/token counters and latency histograms fed by the
``EngineMonitor`` on the engine thread, plus gauges read from ``Engine.stats()`` at scrape time."""

from __future__ import annotations

import dataclasses
from typing import Any

from hinge.server.metrics import (
    ITL_BUCKETS,
    REQUEST_BUCKETS,
    TTFT_BUCKETS,
    Counter,
    Gauge,
    Histogram,
    render,
)


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
    """Every series ``/metrics`` exports. Request series are fed by ``EngineMonitor`` on the
    engine thread; where vLLM has the same series, it has vLLM's name after the ``hinge:`` prefix
    (``vllm:time_to_first_token_seconds`` -> ``hinge:time_to_first_token_seconds``)."""

    def __init__(self) -> None:
        self.requests = Counter("request_success_total", "Finished requests by finish reason "
                                "(stop, length, abort), as vLLM counts them.")
        self.failed = Counter("request_errors_total", "Requests failed by an internal engine fault.")
        self.prompt_tokens = Counter("prompt_tokens_total", "Prompt tokens of prefilled requests.")
        self.generation_tokens = Counter("generation_tokens_total", "Output tokens generated.")
        self.cached_tokens = Counter("cache_hit_tokens_total", "Prompt tokens served from the prefix cache.")
        self.spec_verify = Counter("spec_verify_total", "Speculative verify steps of finished requests.")
        self.spec_tokens = Counter("spec_tokens_total", "Output tokens of requests that ran speculation.")
        self.spec_accept = Gauge("spec_accept_length", "Mean tokens per verify step (0: no speculation).")
        self.ttft = Histogram("time_to_first_token_seconds",
                              "Arrival to first output token, per request.", TTFT_BUCKETS)
        self.itl = Histogram("inter_token_latency_seconds",
                             "Time between output tokens, per token.", ITL_BUCKETS)
        self.tpot = Histogram("time_per_output_token_seconds",
                              "(last token - first token) / (output tokens - 1), per request "
                              "with two or more tokens.", ITL_BUCKETS)
        self.e2e = Histogram("e2e_request_latency_seconds",
                             "Arrival to finish, per request not aborted.", REQUEST_BUCKETS)
        self.queue = Histogram("request_queue_time_seconds",
                               "Arrival to first scheduled, per request.", REQUEST_BUCKETS)
        self.running = Gauge("num_requests_running", "Requests in the running batch.")
        self.waiting = Gauge("num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_total = Gauge("kv_pool_tokens_total", "KV pool capacity in tokens.")
        self.kv_used = Gauge("kv_pool_tokens_used", "KV pool tokens allocated.")
        self.kv_pages_used = Gauge("kv_pool_pages_used", "KV pool pages allocated.")
        self.kv_usage = Gauge("kv_cache_usage_perc", "Fraction (0-1) of the KV pool allocated.")
        self.wedged = Gauge("engine_wedged", "1 when the last engine step failed.")

    # called by EngineMonitor on the engine thread
    def on_scheduled(self, queue_s: float) -> None:
        self.queue.observe(queue_s)

    def on_first_token(self, ttft_s: float, prompt_tokens: int, cached_tokens: int) -> None:
        self.ttft.observe(ttft_s)
        self.prompt_tokens.inc(prompt_tokens)
        self.cached_tokens.inc(cached_tokens)

    def on_tokens(self, num_tokens: int, gap_s: float | None) -> None:
        """``num_tokens`` new tokens of one request; ``gap_s`` since its previous token (None
        when they are its first: only the ones after the first get a gap, of 0)."""
        self.generation_tokens.inc(num_tokens)
        if gap_s is None:
            for _ in range(num_tokens - 1):
                self.itl.observe(0.0)
            return
        for _ in range(num_tokens):
            self.itl.observe(gap_s / num_tokens)

    def on_finish(self, output: Any, e2e_s: float, tpot_s: float | None) -> None:
        self.requests.inc(labels={"finished_reason": str(output.finish_reason)})
        self.e2e.observe(e2e_s)
        if tpot_s is not None:
            self.tpot.observe(tpot_s)
        verify = getattr(output, "spec_verify_ct", 0) or 0
        if verify:
            self.spec_verify.inc(verify)
            self.spec_tokens.inc(len(output.token_ids))
            self.spec_accept.set(self.spec_tokens.value() / self.spec_verify.value())

    def on_abort(self) -> None:
        self.requests.inc(labels={"finished_reason": "abort"})

    def on_error(self, num_requests: int = 1) -> None:
        self.failed.inc(num_requests)

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
            *prefix_cache_series(pick(stats, "prefix_cache", default={}) or {}),
            self.wedged, self.ttft, self.itl, self.tpot, self.e2e, self.queue,
        ])


#: ``EngineStats.prefix_cache`` key -> (series, kind, help); vLLM's names where vLLM has the series
PREFIX_CACHE_SERIES = {
    "query_tokens": ("prefix_cache_queries_total", "counter",
                     "Prompt tokens looked up in the prefix cache (first admissions)."),
    "hit_tokens": ("prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache."),
    "tree_tokens": ("prefix_cache_tree_tokens", "gauge", "Tokens whose KV the prefix cache holds."),
    "tree_nodes": ("prefix_cache_tree_nodes", "gauge", "Nodes of the prefix cache's tree."),
    "tree_checkpoints": ("prefix_cache_checkpoints", "gauge",
                         "Recurrent-state checkpoints the prefix cache holds (hybrid models)."),
    "evicted_pages": ("prefix_cache_evicted_pages_total", "counter", "KV pages evicted from the prefix cache."),
    "evicted_checkpoints": ("checkpoint_evictions_total", "counter",
                            "Recurrent-state checkpoints evicted or dropped by the prefix cache."),
    "checkpoint_slots_total": ("checkpoint_slots_total", "gauge", "Checkpoint slots of the state pool."),
    "checkpoint_slots_used": ("checkpoint_slots_used", "gauge",
                              "Checkpoint slots in use (prefix cache and running requests)."),
    "checkpoints_unwritten": ("checkpoints_unwritten_total", "counter",
                              "Planned checkpoints no receipt confirmed (kept out of the cache)."),
    "checkpoints_skipped": ("checkpoints_skipped_total", "counter",
                            "Planned checkpoints skipped for want of a free checkpoint slot."),
}


def prefix_cache_series(cache: dict[str, Any]) -> list[Gauge]:
    """The prefix cache's series from ``EngineStats.prefix_cache``, plus
    ``hinge:checkpoint_writes_total{path, phase}`` (eager / graph x prefill / decode)."""
    out = []
    for key, (name, kind, help_text) in PREFIX_CACHE_SERIES.items():
        if key in cache:
            series = Gauge(name, help_text)
            series.kind = kind
            series.set(cache[key])
            out.append(series)
    writes = Gauge("checkpoint_writes_total", "Recurrent-state checkpoints written and confirmed "
                   "by their receipt, by path (eager, graph) and phase (prefill, decode).")
    writes.kind = "counter"
    for path, phases in sorted((cache.get("checkpoint_writes") or {}).items()):
        for phase, count in sorted(phases.items()):
            writes.set(count, {"path": str(path), "phase": str(phase)})
    return out + [writes]
