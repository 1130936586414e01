"""``hinge bench``: throughput and latency of the engine in this process or of a running server.

``add_arguments(parser)`` adds the flags and ``run(args, config)`` runs the benchmark (both
called by ``hinge.cli``). One concept per module: ``prompts`` (the workload), ``arrivals``
(Poisson schedule, open-loop sender), ``stats`` (per-request records, percentiles),
``result`` (one side's run), ``offline`` (the in-process engine), ``hf`` (the transformers
baseline), ``serving`` (the HTTP client), ``report`` (table, JSON), ``command`` (end to end).
Random weights and sweeps: ``presets`` (published configurations by --arch/--size),
``random_model`` (a config.json + tokenizer directory, no weights), ``points`` (one run or one
per concurrency, and the order the sides run them), ``sides`` (hinge and transformers),
``inprocess`` (the run in this process), ``sweep_report`` (a row per concurrency), ``plot``.
"""

from __future__ import annotations

from hinge.bench.arrivals import poisson_arrivals, send_open_loop
from hinge.bench.command import make_prompts, run
from hinge.bench.hf import bench_hf, build_hf_random, load_hf
from hinge.bench.offline import bench_hinge
from hinge.bench.options import add_arguments, check_arguments
from hinge.bench.points import Point, parse_concurrencies, run_points, sweep_points
from hinge.bench.presets import PRESETS, describe, preset_config
from hinge.bench.prompts import file_prompts, parse_len_range, random_id_prompts, synthetic_prompts
from hinge.bench.random_model import read_model_config, write_random_model
from hinge.bench.report import format_table, to_json
from hinge.bench.result import BenchResult
from hinge.bench.serving import ServerTarget, bench_server
from hinge.bench.stats import RequestRecord, latency_summaries, percentile, summarize_ms
from hinge.bench.sweep_report import SweepRow, format_sweep_table, sweep_rows

__all__ = [
    "PRESETS", "BenchResult", "Point", "RequestRecord", "ServerTarget", "SweepRow",
    "add_arguments", "bench_hf", "bench_hinge", "bench_server", "build_hf_random",
    "check_arguments", "describe", "file_prompts", "format_sweep_table", "format_table",
    "latency_summaries", "load_hf", "make_prompts", "parse_concurrencies", "parse_len_range",
    "percentile", "poisson_arrivals", "preset_config", "random_id_prompts", "read_model_config",
    "run", "run_points", "send_open_loop", "summarize_ms", "sweep_points", "sweep_rows",
    "synthetic_prompts", "to_json", "write_random_model",
]
