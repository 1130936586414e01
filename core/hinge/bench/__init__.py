"""``hinge bench``: throughput and latency of the engine in this process or of a running server.

``add_arguments(parser)`` adds the flags and ``run(args, config)`` runs the benchmark (both
called by ``hinge.cli``). One concept per module: ``prompts`` (the workload), ``arrivals``
(Poisson schedule, open-loop sender), ``stats`` (per-request records, percentiles),
``result`` (one side's run), ``offline`` (the in-process engine), ``hf`` (the transformers
baseline), ``serving`` (the HTTP client), ``report`` (table, JSON), ``command`` (end to end).
"""

from __future__ import annotations

from hinge.bench.arrivals import poisson_arrivals, send_open_loop
from hinge.bench.command import make_prompts, run
from hinge.bench.hf import bench_hf, load_hf
from hinge.bench.offline import bench_hinge
from hinge.bench.options import add_arguments, check_arguments
from hinge.bench.prompts import file_prompts, parse_len_range, synthetic_prompts
from hinge.bench.report import format_table, to_json
from hinge.bench.result import BenchResult
from hinge.bench.serving import ServerTarget, bench_server
from hinge.bench.stats import RequestRecord, latency_summaries, percentile, summarize_ms

__all__ = [
    "BenchResult", "RequestRecord", "ServerTarget", "add_arguments", "bench_hf", "bench_hinge",
    "bench_server", "check_arguments", "file_prompts", "format_table", "latency_summaries",
    "load_hf", "make_prompts", "parse_len_range", "percentile", "poisson_arrivals", "run",
    "send_open_loop", "summarize_ms", "synthetic_prompts", "to_json",
]
