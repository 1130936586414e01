"""``hinge bench`` end to end: build the workload, run each side ``--repeat`` times, report.

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
from hinge.bench.hf import bench_hf, load_hf
from hinge.bench.offline import bench_hinge
from hinge.bench.options import check_arguments
from hinge.bench.prompts import file_prompts, parse_len_range, synthetic_prompts
from hinge.bench.report import format_table, to_json
from hinge.bench.result import BenchResult
from hinge.bench.serving import ServerTarget, bench_server, first_model_name, server_info

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.engine.tokenizer import Tokenizer


def run(args: argparse.Namespace, config: EngineConfig) -> int:
    """Run the benchmark ``args`` describe; print the table (and JSON); return the exit status."""
    check_arguments(args)
    config = config.resolved()
    if args.url:
        results, header, summary = _run_server(args, config)
    else:
        results, header, summary = _run_offline(args, config)
    text = sys.stderr if args.json else sys.stdout
    print(header, file=text)
    print(format_table(results), file=text)
    if "output_throughput_ratio" in summary:
        print(f"hinge / transformers output throughput: {summary['output_throughput_ratio']:.2f}x "
              f"(same prompts, same run, {results[0].torch_threads} torch threads on both sides);"
              f" identical greedy outputs: {summary['identical_outputs']}/"
              f"{results[0].num_requests}", file=text)
    if args.json:
        settings = {**_settings(args, config), **summary.pop("settings", {})}
        json.dump(to_json(results, settings, summary), sys.stdout)
        sys.stdout.write("\n")
    return 1 if any(r.failed for r in results) else 0


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
            "url": args.url, "backend": args.backend if args.url else None}


def _progress(args: argparse.Namespace, total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=args.disable_tqdm,
                dynamic_ncols=True)


def _fastest(runs: list[BenchResult]) -> BenchResult:
    return min(runs, key=lambda r: r.wall_s)


def _best_of(args: argparse.Namespace) -> str:
    return f"; fastest of {args.repeat} runs" if args.repeat > 1 else ""


# in this process ---------------------------------------------------------------------------


def _run_offline(args: argparse.Namespace, config: EngineConfig
                 ) -> tuple[list[BenchResult], str, dict[str, Any]]:
    import torch

    from hinge.engine.engine import Engine

    engine = Engine(config)
    threads = torch.get_num_threads()  # after the engine chose its own, if it does
    sides: dict[str, list[BenchResult]] = {"hinge": []}
    try:
        prompts = make_prompts(args, engine.tokenizer)
        arrivals = poisson_arrivals(len(prompts), args.request_rate, args.seed)
        hf_model = None
        if args.compare_hf:
            from hinge.builtin import default_model_path

            hf_model = load_hf(str(config.model or default_model_path()), device=config.device,
                               dtype=config.torch_dtype())
            sides["transformers"] = []
        for k in range(args.repeat):  # alternate the sides so load bursts hit both alike
            torch.set_num_threads(threads)
            with _progress(args, len(prompts), f"hinge {k + 1}/{args.repeat}") as bar:
                result = bench_hinge(engine, prompts, args.output_len, arrivals=arrivals,
                                     max_concurrency=args.max_concurrency,
                                     request_rate=args.request_rate, progress=bar)
            result.torch_threads = torch.get_num_threads()
            sides["hinge"].append(result)
            if hf_model is not None:
                torch.set_num_threads(threads)
                sides["transformers"].append(bench_hf(
                    hf_model, prompts, args.output_len, batch_size=args.hf_batch_size,
                    pad_id=_pad_id(engine.tokenizer)))
    finally:
        engine.close()
    results = [_fastest(runs) for runs in sides.values()]
    summary: dict[str, Any] = {"settings": {"model": str(config.model or "embedded default"),
                                            "device": config.device,
                                            "dtype": str(config.resolved_dtype),
                                            "torch_threads": threads}}
    if hf_model is not None:
        ours, hf = results
        summary |= {"output_throughput_ratio": ours.output_tok_s / hf.output_tok_s,
                    "identical_outputs": sum(a == b for a, b in zip(ours.outputs, hf.outputs,
                                                                    strict=True))}
    header = (f"model: {config.model or 'embedded default'}; device {config.device}, dtype "
              f"{config.resolved_dtype}, torch threads {threads}; {len(prompts)} prompts, "
              f"{args.output_len} output tokens each{_best_of(args)}")
    return results, header, summary


def _pad_id(tokenizer: Tokenizer) -> int:
    pad_id = tokenizer.pad_token_id
    return pad_id if pad_id is not None else (tokenizer.eos_token_ids or [0])[0]


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
