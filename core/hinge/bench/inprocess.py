"""``hinge bench`` in this process: the model (a checkpoint, or a configuration with random
weights), the workload, the points (one run, or one per ``--concurrency-sweep`` concurrency)
and the sides (hinge, and transformers with ``--compare-hf``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hinge import default_model_path
from hinge.bench.arrivals import poisson_arrivals
from hinge.bench.points import Point, parse_concurrencies, run_points, sweep_points
from hinge.bench.presets import describe
from hinge.bench.prompts import file_prompts, parse_len_range, random_id_prompts, synthetic_prompts
from hinge.bench.random_model import random_model_config, wants_random_weights, write_random_model
from hinge.bench.result import BenchResult
from hinge.bench.sides import HFSide, HingeSide
from hinge.bench.sweep_report import SweepRow, sweep_rows

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.engine.tokenizer import Tokenizer

#: printed (and in the JSON) wherever a random-weight run is compared with transformers
NOT_COMPARED = ("greedy outputs are not compared for random weights (each side has its own "
                "random initialisation of the same shapes)")


@dataclass
class LocalReport:
    """What the in-process run measured: ``results`` (one per side) for a plain run, ``rows``
    (one per concurrency and side) for a sweep."""

    header: str
    settings: dict[str, Any]
    title: str = ""  #: a short line for the plot
    results: list[BenchResult] = field(default_factory=list)
    rows: list[SweepRow] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    random_weights: bool = False


def run_in_process(args: argparse.Namespace, config: EngineConfig,
                   progress: Callable[[str, int], Any] | None = None) -> LocalReport:
    """Run the benchmark ``args`` describe on ``config`` (already ``resolved()``)."""
    import torch

    with tempfile.TemporaryDirectory(prefix="hinge-bench-model-") as tmp:
        config, label, shape = _model(args, config, tmp)
        random_weights = config.load_format == "dummy"
        concurrencies = (parse_concurrencies(args.concurrency_sweep)
                         if args.concurrency_sweep else None)
        need = max(concurrencies) if concurrencies else (args.max_concurrency or 0)
        raised = need > config.max_running_requests
        if raised:  # a concurrency the engine would cap is not that concurrency
            config = config.model_copy(update={"max_running_requests": need})
        points = _points(args, config, random_weights, concurrencies)
        hinge = HingeSide(config)
        sides: list[Any] = [hinge]
        if args.compare_hf:
            sides.append(HFSide(str(config.model), device=config.device,
                                dtype=config.torch_dtype(), random_weights=random_weights,
                                pad_id=0 if random_weights else _pad_id(_tokenizer(config))))
        threads: list[int] = []

        def same_threads() -> None:  # the count the engine settled on, for every run
            if not threads:
                threads.append(torch.get_num_threads())
            torch.set_num_threads(threads[0])

        per_point = run_points(sides, points, output_len=args.output_len, repeat=args.repeat,
                               sequential=config.device == "cuda", before_run=same_threads,
                               progress=progress)
    fastest = [{name: min(runs, key=lambda r: r.wall_s) for name, runs in sides_.items()}
               for sides_ in per_point]
    for point in fastest:
        for result in point.values():
            result.torch_threads = threads[0]
    model = f"{label} with random weights ({shape})" if shape else label
    params = f"; {_count(hinge.num_parameters)} parameters" if hinge.num_parameters else ""
    header = (f"model: {model}{params}; device {config.device}, dtype {config.resolved_dtype}, "
              f"torch threads {threads[0]}")
    if raised:
        header += f"; max_running_requests raised to {need} for concurrency {need}"
    settings = {"model": model, "device": config.device, "dtype": str(config.resolved_dtype),
                "torch_threads": threads[0], "random_weights": random_weights,
                "parameters": hinge.num_parameters,
                "max_running_requests": config.max_running_requests}
    title = (f"{label}{' (random weights)' if random_weights else ''}; {config.device} "
             f"{config.resolved_dtype}; {args.output_len} output tokens per request")
    report = LocalReport(header, settings, title=title, random_weights=random_weights)
    if concurrencies:
        report.rows = sweep_rows(concurrencies, fastest)
        report.header += (f"; concurrency sweep {','.join(map(str, concurrencies))}: "
                          f"{args.sweep_rounds} x C prompts at concurrency C, "
                          f"{args.output_len} output tokens each{_best_of(args)}")
    else:
        report.results = list(fastest[0].values())
        report.header += (f"; {len(points[0].prompts)} prompts, {args.output_len} output tokens "
                          f"each{_best_of(args)}")
        report.summary = _comparison(report.results, random_weights)
    if args.compare_hf and random_weights:
        report.summary["note"] = NOT_COMPARED
    return report


def _model(args: argparse.Namespace, config: EngineConfig, directory: str
           ) -> tuple[EngineConfig, str, str]:
    """The config to run, a label for the model and (random weights) its shape."""
    if not wants_random_weights(args):
        label = str(config.model or "embedded default")
        if config.model is None:  # every side (transformers too) reads the same directory
            config = config.model_copy(update={"model": str(default_model_path())})
        if config.load_format == "dummy":
            return config, label, "load_format=dummy"
        return config, label, ""
    model_config, label = random_model_config(args)
    write_random_model(directory, model_config)
    config = config.model_copy(update={"model": directory, "load_format": "dummy"})
    return config, label, describe(model_config)


def _points(args: argparse.Namespace, config: EngineConfig, random_weights: bool,
            concurrencies: list[int] | None) -> list[Point]:
    count = max(concurrencies) * args.sweep_rounds if concurrencies else args.num_prompts
    if random_weights:
        from hinge.models.loader import load_config

        lo, hi = parse_len_range(args.input_len_range)
        vocab = load_config(str(config.model))[1].vocab_size
        prompts = random_id_prompts(vocab, count, lo, hi, args.seed)
    elif args.prompts_file:
        prompts = file_prompts(args.prompts_file, _tokenizer(config))
    else:
        lo, hi = parse_len_range(args.input_len_range)
        prompts = synthetic_prompts(_tokenizer(config), count, lo, hi, args.seed)
    if concurrencies:
        return sweep_points(prompts, concurrencies, args.sweep_rounds)
    arrivals = poisson_arrivals(len(prompts), args.request_rate, args.seed)
    return [Point(prompts, concurrency=args.max_concurrency, arrivals=arrivals,
                  request_rate=args.request_rate,
                  hf_batch_size=args.hf_batch_size or args.max_concurrency or 0)]


def _comparison(results: list[BenchResult], random_weights: bool) -> dict[str, Any]:
    if len(results) < 2:
        return {}
    ours, hf = results
    return {"output_throughput_ratio": ours.output_tok_s / hf.output_tok_s,
            "identical_outputs": None if random_weights else
            sum(a == b for a, b in zip(ours.outputs, hf.outputs, strict=True))}


def _tokenizer(config: EngineConfig) -> Tokenizer:
    from hinge.engine.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(config.model or default_model_path())


def _pad_id(tokenizer: Tokenizer) -> int:
    pad_id = tokenizer.pad_token_id
    return pad_id if pad_id is not None else (tokenizer.eos_token_ids or [0])[0]


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def _best_of(args: argparse.Namespace) -> str:
    return f"; fastest of {args.repeat} runs" if args.repeat > 1 else ""
