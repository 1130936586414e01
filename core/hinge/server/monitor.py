"""``EngineMonitor``: the engine as the server drives it, timed on the engine thread.

Per request it records arrival (when the route submitted it, handed over by ``expect``), first
scheduled (the first step after which the engine no longer lists it as waiting), first token and
finish, and feeds ``ServerMetrics``: queue time, TTFT, inter-token latency, time per output
token, end-to-end latency, tokens, finish reasons. An abort the engine confirms is counted as
``finished_reason="abort"``; requests of a step that raised count as errors. After each step it
hands ``BatchLog`` what the step did, for sglang's prefill and decode log lines.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from hinge.server.batch_log import DEFAULT_DECODE_LOG_INTERVAL, BatchLog
from hinge.server.server_metrics import ServerMetrics, stats_dict


@dataclass
class _Timing:
    arrival: float
    prompt_len: int
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    num_tokens: int = 0


class EngineMonitor:
    """Wraps an engine (``add_request``, ``abort_request``, ``step`` are timed; every other
    attribute is the engine's). Runs only on the engine thread, except ``expect``/``unexpect``."""

    def __init__(self, engine: Any, metrics: ServerMetrics,
                 decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL) -> None:
        self.engine = engine
        self.metrics = metrics
        self.batch_log = BatchLog(decode_log_interval)
        self._arrivals: dict[str, float] = {}  #: rid -> arrival, from the event loop
        self._arrivals_lock = threading.Lock()
        self._queued: dict[str, _Timing] = {}  #: added, not yet scheduled
        self._running: dict[str, _Timing] = {}  #: scheduled, not finished

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    # event loop side
    def expect(self, rid: str, arrival: float) -> None:
        """``rid`` arrived at ``arrival`` (perf_counter) and is about to be added."""
        with self._arrivals_lock:
            self._arrivals.setdefault(rid, arrival)

    def unexpect(self, rid: str, arrival: float) -> None:
        """The submit of ``rid`` that ``expect`` announced failed before it was added."""
        with self._arrivals_lock:
            if self._arrivals.get(rid) == arrival:
                del self._arrivals[rid]

    # engine thread side
    def add_request(self, prompt_ids: list[int], params: Any, rid: str | None = None) -> str:
        rid = self.engine.add_request(prompt_ids, params, rid)
        with self._arrivals_lock:
            arrival = self._arrivals.pop(rid, None)
        self._queued[rid] = _Timing(arrival if arrival is not None else time.perf_counter(),
                                    len(prompt_ids))
        return rid

    def abort_request(self, rid: str) -> bool:
        found = self.engine.abort_request(rid)
        tracked = self._queued.pop(rid, None) or self._running.pop(rid, None)
        if found and tracked is not None:
            self.metrics.on_abort()
        return found

    def step(self) -> list[Any]:
        started = time.perf_counter()
        try:
            outputs = self.engine.step()
        except Exception:
            self.metrics.on_error(len(self._queued) + len(self._running))
            self._queued.clear()
            self._running.clear()
            raise
        ended = time.perf_counter()
        self._scheduled(started, outputs)
        num_tokens, is_decode = self._outputs(outputs, ended)
        self.batch_log.step(started, ended, num_tokens, is_decode, self._stats)
        return outputs

    def _stats(self) -> dict[str, Any]:
        return stats_dict(self.engine.stats())

    def _scheduled(self, started: float, outputs: list[Any]) -> None:
        """Move requests the engine no longer lists as waiting to running; log the prefill."""
        if not self._queued:
            return
        by_rid = {out.rid: out for out in outputs}
        waiting, running = _queues(self.engine)
        new = [rid for rid in self._queued if waiting is None or rid not in waiting]
        num_new_tokens = num_cached = 0
        for rid in new:
            timing = self._queued.pop(rid)
            timing.scheduled = started
            self._running[rid] = timing
            self.metrics.on_scheduled(max(started - timing.arrival, 0.0))
            source = running.get(rid) or by_rid.get(rid)
            cached = getattr(source, "cached_tokens", 0) or 0
            num_cached += cached
            num_new_tokens += max(timing.prompt_len - cached, 0)
        self.batch_log.prefill(len(new), num_new_tokens, num_cached, self._stats)

    def _outputs(self, outputs: list[Any], now: float) -> tuple[int, bool]:
        """Token and finish metrics; returns the step's new tokens and whether any of them
        continued a request that already had its first token (a decode step)."""
        num_tokens, is_decode = 0, False
        for out in outputs:
            timing = self._running.get(out.rid)
            if timing is None:  # aborted by us (counted then), or never added through us
                continue
            num_new = len(out.new_token_ids)
            if num_new:
                num_tokens += num_new
                if timing.first_token is None:
                    timing.first_token = now
                    self.metrics.on_first_token(now - timing.arrival, len(out.prompt_token_ids),
                                                getattr(out, "cached_tokens", 0) or 0)
                    self.metrics.on_tokens(num_new, None)
                else:
                    is_decode = True
                    self.metrics.on_tokens(num_new, now - (timing.last_token or now))
                timing.last_token = now
                timing.num_tokens += num_new
            if out.finished:
                del self._running[out.rid]
                if out.finish_reason == "abort":
                    self.metrics.on_abort()
                    continue
                tpot = None
                if timing.num_tokens >= 2 and timing.first_token is not None:
                    decode_s = (timing.last_token or now) - timing.first_token
                    tpot = decode_s / (timing.num_tokens - 1)
                self.metrics.on_finish(out, now - timing.arrival, tpot)
        return num_tokens, is_decode


def _queues(engine: Any) -> tuple[set[str] | None, dict[str, Any]]:
    """The rids the engine's scheduler holds as waiting (None: it does not say, so every added
    request counts as scheduled by the next step) and its running requests by rid."""
    scheduler = getattr(engine, "scheduler", None)
    if scheduler is None:
        return None, {}
    return ({req.rid for req in scheduler.waiting},
            {req.rid: req for req in getattr(scheduler, "running", ())})

