"""``BenchResult``: one side's run (hinge offline, transformers, or a server) and its totals."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hinge.bench.stats import RequestRecord, achieved_request_rate, latency_summaries


@dataclass
class BenchResult:
    """The requests of one run and its wall time (first send to last completion)."""

    name: str
    records: list[RequestRecord]
    wall_s: float
    outputs: list[list[int]] = field(default_factory=list, repr=False)  #: output ids, when known
    request_rate: float = math.inf  #: the rate asked for (requests/s); inf = all at once
    torch_threads: int | None = None  #: torch's intra-op threads during the run (in-process runs)
    note: str = ""

    @property
    def num_requests(self) -> int:
        return len(self.records)

    @property
    def completed(self) -> int:
        return sum(r.ok for r in self.records)

    @property
    def failed(self) -> int:
        return self.num_requests - self.completed

    @property
    def input_tokens(self) -> int:
        return sum(r.input_len for r in self.records if r.ok)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_len for r in self.records if r.ok)

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def total_tok_s(self) -> float:
        return (self.input_tokens + self.output_tokens) / self.wall_s

    @property
    def request_throughput(self) -> float:
        """Completed requests per second of wall time."""
        return self.completed / self.wall_s

    @property
    def achieved_request_rate(self) -> float | None:
        return achieved_request_rate(self.records)

    def errors(self, limit: int = 3) -> list[str]:
        """The first ``limit`` distinct error messages."""
        return sorted({r.error for r in self.records if not r.ok})[:limit]

    def to_dict(self) -> dict[str, Any]:
        """Everything the table shows, as plain JSON values (no infinities: an unlimited request
        rate is null)."""
        return {
            "name": self.name, "num_requests": self.num_requests, "completed": self.completed,
            "failed": self.failed, "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens, "wall_s": self.wall_s,
            "request_rate": None if math.isinf(self.request_rate) else self.request_rate,
            "achieved_request_rate": self.achieved_request_rate,
            "request_throughput": self.request_throughput, "output_tok_s": self.output_tok_s,
            "total_tok_s": self.total_tok_s, **latency_summaries(self.records),
            "torch_threads": self.torch_threads, "errors": self.errors(), "note": self.note,
        }
