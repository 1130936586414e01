"""Serving stats as sglang logs them, at INFO on the ``hinge.server`` logger::

    Prefill batch. #new-seq: 2, #new-token: 128, #cached-token: 0, token usage: 0.05, #running-req: 2, #queue-req: 0
    Decode batch. #running-req: 2, #token: 412, token usage: 0.05, gen throughput (token/s): 123.40, #queue-req: 0

A prefill line follows every step that scheduled requests for the first time: their number, their
prompt tokens still to compute and those served from the prefix cache (a chunked prompt is counted
whole, in the step that admits it). A decode line follows every ``decode_log_interval`` steps that
produced a token for an already-started request (sglang's ``--decode-log-interval``, default 40;
0 turns decode lines off); its throughput is the tokens generated since the last decode line over
the wall time since then (or since the first step after that line). ``#token`` and usage are KV
pool tokens; running, queued and usage are read after the step. Nothing is logged while idle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hinge.server.server_metrics import pick

logger = logging.getLogger("hinge.server")

#: sglang's default: one decode line per 40 decode steps
DEFAULT_DECODE_LOG_INTERVAL = 40


class BatchLog:
    """Counts steps and tokens; writes a prefill line and every N decode steps a decode line."""

    def __init__(self, decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL,
                 log: logging.Logger = logger) -> None:
        if decode_log_interval < 0:
            raise ValueError(f"decode_log_interval must be >= 0 (0 = off), got "
                             f"{decode_log_interval}")
        self.decode_log_interval = decode_log_interval
        self.log = log
        self._decode_steps = 0
        self._tokens = 0
        self._since: float | None = None  #: start of the first step counted since the last line

    def prefill(self, num_seqs: int, num_new_tokens: int, num_cached_tokens: int,
                stats: Callable[[], dict[str, Any]]) -> None:
        """Requests scheduled for the first time in the step that just ran."""
        if num_seqs == 0 or not self.log.isEnabledFor(logging.INFO):
            return
        s = stats()
        self.log.info("Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: %d, "
                      "token usage: %.2f, #running-req: %d, #queue-req: %d",
                      num_seqs, num_new_tokens, num_cached_tokens, _usage(s),
                      pick(s, "num_running"), pick(s, "num_waiting"))

    def step(self, started: float, ended: float, num_tokens: int, is_decode: bool,
             stats: Callable[[], dict[str, Any]]) -> None:
        """A step from ``started`` to ``ended`` (perf_counter seconds) produced ``num_tokens``."""
        if self.decode_log_interval == 0:
            return
        if self._since is None:
            self._since = started
        self._tokens += num_tokens
        self._decode_steps += is_decode
        if not is_decode or self._decode_steps % self.decode_log_interval:
            return
        throughput = self._tokens / max(ended - self._since, 1e-9)
        self._tokens, self._since = 0, None
        if not self.log.isEnabledFor(logging.INFO):
            return
        s = stats()
        self.log.info("Decode batch. #running-req: %d, #token: %d, token usage: %.2f, "
                      "gen throughput (token/s): %.2f, #queue-req: %d",
                      pick(s, "num_running"), _used_tokens(s), _usage(s), throughput,
                      pick(s, "num_waiting"))


def _used_tokens(stats: dict[str, Any]) -> int:
    page_size = pick(stats, "page_size", default=1) or 1
    return int(pick(stats, "kv_tokens_used", default=pick(stats, "kv_pages_used") * page_size))


def _usage(stats: dict[str, Any]) -> float:
    total = pick(stats, "kv_tokens_total")
    return _used_tokens(stats) / total if total else 0.0
