"""``hinge bench`` end to end: run in this process (``hinge.bench.inprocess``) or against a
server, print the table (one column per side, or one row per concurrency of a sweep), report.

With ``--json`` stdout holds one JSON document and nothing else; the header and table go to
stderr, like the progress bar. The exit status is 1 when any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hinge.bench.arrivals import poisson_arrivals
from hinge.bench.inprocess import LocalReport, run_in_process
from hinge.bench.options import check_arguments
from hinge.bench.prompts import file_prompts, parse_len_range, synthetic_prompts
from hinge.bench.report import format_table, to_json
from hinge.bench.result import BenchResult
from hinge.bench.serving import ServerTarget, bench_server, first_model_name, server_info
from hinge.bench.sweep_report import format_sweep_table, sweep_json

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.engine.tokenizer import Tokenizer


def run(args: argparse.Namespace, config: EngineConfig) -> int:
    """Run the benchmark ``args`` describe; print the table (and JSON); return the exit status."""
    check_arguments(args)
    config = config.resolved()
    text = sys.stderr if args.json else sys.stdout
    if args.url:
        results, header, summary = _run_server(args, config)
        print(header, file=text)
        print(format_table(results), file=text)
        document = to_json(results, {**_settings(args, config), **summary.pop("settings")},
                           summary)
    else:
        report = run_in_process(args, config, progress=lambda desc, total: _progress(
            args, total, desc))
        results = report.results or [row.result for row in report.rows]
        document = {"settings": {**_settings(args, config), **report.settings},
                    **_print_local(args, report, text)}
    if args.json:
        json.dump(document, sys.stdout)
        sys.stdout.write("\n")
    return 1 if any(r.failed for r in results) else 0


def _print_local(args: argparse.Namespace, report: LocalReport, text: Any) -> dict[str, Any]:
    """Print the in-process report's header, table and comparison; return its JSON document
    (without settings)."""
    print(report.header, file=text)
    summary = dict(report.summary)
    if report.rows:
        print(format_sweep_table(report.rows), file=text)
        document: dict[str, Any] = {"sweep": sweep_json(report.rows), **summary}
        if args.plot:
            from hinge.bench.plot import plot_sweep

            path = plot_sweep(report.rows, args.plot, title=report.title)
            print(f"plot: {path}", file=text)
    else:
        print(format_table(report.results), file=text)
        document = {k: v for k, v in to_json(report.results, {}, summary).items()
                    if k != "settings"}
        if "output_throughput_ratio" in summary:
            ours = report.results[0]
            same = (f"identical greedy outputs: {summary['identical_outputs']}/"
                    f"{ours.num_requests}" if summary["identical_outputs"] is not None else "")
            print(f"hinge / transformers output throughput: "
                  f"{summary['output_throughput_ratio']:.2f}x (same prompts, same run, "
                  f"{ours.torch_threads} torch threads on both sides); {same}".rstrip("; "),
                  file=text)
    if "note" in summary:
        print(summary["note"], file=text)
    return document


def make_prompts(args: argparse.Namespace, tokenizer: Tokenizer) -> list[list[int]]:
    """The ``--prompts-file`` prompts, or ``--num-prompts`` synthetic ones."""
    if args.prompts_file:
        return file_prompts(args.prompts_file, tokenizer)
    lo, hi = parse_len_range(args.input_len_range)
    return synthetic_prompts(tokenizer, args.num_prompts, lo, hi, args.seed)


def _settings(args: argparse.Namespace, config: EngineConfig) -> dict[str, Any]:
    return {"num_prompts": args.num_prompts, "input_len_range": args.input_len_range,
            "prompts_file": args.prompts_file, "output_len": args.output_len,
            "request_rate": None if math.isinf(args.request_rate) else args.request_rate,
            "max_concurrency": args.max_concurrency, "seed": args.seed, "repeat": args.repeat,
            "url": args.url, "backend": args.backend if args.url else None,
            "arch": args.arch, "size": args.size, "model_config": args.model_config,
            "concurrency_sweep": args.concurrency_sweep, "sweep_rounds": args.sweep_rounds}


def _progress(args: argparse.Namespace, total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=args.disable_tqdm,
                dynamic_ncols=True)


def _fastest(runs: list[BenchResult]) -> BenchResult:
    return min(runs, key=lambda r: r.wall_s)


def _best_of(args: argparse.Namespace) -> str:
    return f"; fastest of {args.repeat} runs" if args.repeat > 1 else ""


# against a server --------------------------------------------------------------------------


def _run_server(args: argparse.Namespace, config: EngineConfig
                ) -> tuple[list[BenchResult], str, dict[str, Any]]:
    target = ServerTarget(args.url, backend=args.backend, api_key=args.api_key,
                          timeout_s=args.request_timeout)
    info = server_info(target)
    if args.backend == "openai":
        target.model = first_model_name(target)
    tokenizer, tokenizer_path = _server_tokenizer(args, config, info)
    prompts = make_prompts(args, tokenizer)
    arrivals = poisson_arrivals(len(prompts), args.request_rate, args.seed)
    runs = []
    for k in range(args.repeat):
        with _progress(args, len(prompts), f"{args.url} {k + 1}/{args.repeat}") as bar:
            runs.append(asyncio.run(bench_server(
                target, prompts, args.output_len, arrivals=arrivals,
                max_concurrency=args.max_concurrency, request_rate=args.request_rate,
                progress=bar, warm_up=k == 0)))
    model = (info.get("model") or {}).get("path", target.model or "unknown")
    header = (f"server: {args.url} ({args.backend} API), model {model}; prompts from the "
              f"tokenizer at {tokenizer_path}; {len(prompts)} prompts, {args.output_len} output "
              f"tokens each{_best_of(args)}")
    summary = {"settings": {"model": model, "tokenizer": str(tokenizer_path)}}
    return [_fastest(runs)], header, summary


def _server_tokenizer(args: argparse.Namespace, config: EngineConfig, info: dict[str, Any]
                      ) -> tuple[Tokenizer, Path]:
    from hinge.builtin import default_model_path
    from hinge.engine.tokenizer import Tokenizer

    served = (info.get("model") or {}).get("path")
    if args.tokenizer:
        path = Path(args.tokenizer)
    elif served and Path(served).is_dir():
        path = Path(served)
    else:
        path = Path(config.model or default_model_path())
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer directory {path} does not exist; pass --tokenizer "
                                "with the served model's directory")
    tokenizer = Tokenizer.from_pretrained(path)
    vocab = (info.get("model") or {}).get("vocab_size")
    if vocab is not None and tokenizer.vocab_size > vocab:
        raise ValueError(f"the tokenizer at {path} has {tokenizer.vocab_size} tokens but the "
                         f"server's model has {vocab}; pass --tokenizer with the served model's "
                         "directory")
    return tokenizer, path
