"""``hinge bench`` flags (``--help`` shows each default) and the checks argparse cannot make."""

from __future__ import annotations

import argparse
import math
import os

from hinge.bench.presets import DEFAULT_SIZES, PRESETS
from hinge.bench.serving import BACKENDS

DESCRIPTION = """\
Benchmark the engine in this process (default) or a running server (--url). Prompts are
seeded random token ids (or --prompts-file); every request produces exactly --output-len tokens
(greedy, eos ignored). Requests arrive open loop: at --request-rate per second (Poisson, seeded
by --seed) whatever is outstanding, held back only by --max-concurrency. Reports throughput and
mean/p50/p90/p99 of time to first token (TTFT), time per output token (TPOT) and end-to-end
latency. With --repeat N each side runs N times (alternating with --compare-hf) and the table
shows each side's fastest run (shortest wall time).

Real shapes without a checkpoint: --random-weights --arch qwen3 --size 8b (or --model-config
config.json) builds the published configuration with seeded random weights; its prompts are
random ids below the model's vocabulary. --concurrency-sweep 1,8,64 runs once per concurrency
(a table row each; 1 is batch-1 latency) and --plot FILE.png draws throughput and latency
against concurrency."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench flags to ``parser`` (the ``hinge bench`` subparser)."""
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    work = parser.add_argument_group("workload")
    work.add_argument("--num-prompts", type=int, default=32, metavar="N",
                      help="number of requests (default: %(default)s)")
    work.add_argument("--input-len-range", default="16,128", metavar="MIN,MAX",
                      help="synthetic prompt lengths in tokens, drawn uniformly "
                      "(default: %(default)s)")
    work.add_argument("--output-len", type=int, default=64, metavar="N",
                      help="output tokens per request (default: %(default)s)")
    work.add_argument("--seed", type=int, default=0, metavar="N",
                      help="seed of the synthetic prompts and the arrival times "
                      "(default: %(default)s)")
    work.add_argument("--prompts-file", metavar="PATH", help="text prompts instead of synthetic "
                      "ones: one per line, or .jsonl lines with a 'prompt' field (default: none)")
    load = parser.add_argument_group("arrivals")
    load.add_argument("--request-rate", type=float, default=math.inf, metavar="R",
                      help="requests per second, Poisson arrivals sent open loop; inf sends all "
                      "at once (default: %(default)s)")
    load.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                      help="most requests in flight; later arrivals wait for a slot "
                      "(default: no cap)")
    srv = parser.add_argument_group("server (--url)")
    srv.add_argument("--url", metavar="URL", help="benchmark the server at URL, e.g. "
                     "http://127.0.0.1:30000, instead of an engine in this process "
                     "(default: none)")
    srv.add_argument("--backend", choices=BACKENDS, default="native",
                     help="native: POST /generate; openai: POST /v1/completions; both streamed "
                     "(default: %(default)s)")
    srv.add_argument("--api-key", default=os.environ.get("HINGE_API_KEY"), metavar="KEY",
                     help="bearer token for the server (default: $HINGE_API_KEY)")
    srv.add_argument("--tokenizer", metavar="PATH", help="tokenizer for the prompts (default: "
                     "the server's model directory if it exists here, else --model, else the "
                     "embedded model)")
    srv.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                     help="seconds one request may take (default: %(default)s)")
    rnd = parser.add_argument_group("random weights (real shapes, no checkpoint)")
    rnd.add_argument("--random-weights", action="store_true",
                     help="build the --arch/--size preset (or --model-config) with seeded random "
                     "weights (load_format=dummy) and the embedded tokenizer; prompts are random "
                     "ids below the model's vocabulary and nothing is detokenized")
    rnd.add_argument("--arch", choices=list(PRESETS), default=None,
                     help="model family of the preset (default: qwen3)")
    rnd.add_argument("--size", metavar="SIZE", default=None,
                     help="preset size: " + "; ".join(f"{arch}: {', '.join(sizes)}"
                                                      for arch, sizes in PRESETS.items())
                     + " (default: " + ", ".join(f"{a} {s}" for a, s in DEFAULT_SIZES.items())
                     + "; tiny ones are for tests)")
    rnd.add_argument("--model-config", metavar="CONFIG.JSON", default=None,
                     help="a model's config.json to build with random weights instead of a "
                     "preset (implies --random-weights)")
    swp = parser.add_argument_group("concurrency sweep")
    swp.add_argument("--concurrency-sweep", metavar="C1,C2,...", default=None,
                     help="one run per concurrency C (C x --sweep-rounds prompts sent at once, "
                     "at most C in flight; transformers in batches of C), a table row each "
                     "with output tok/s and TTFT/TPOT percentiles; --num-prompts is not used "
                     "(default: none)")
    swp.add_argument("--sweep-rounds", type=int, default=1, metavar="N",
                     help="prompts per sweep point = N x its concurrency (default: %(default)s)")
    swp.add_argument("--plot", metavar="FILE.png", default=None,
                     help="draw output tok/s and p50 TTFT/TPOT against concurrency (needs "
                     "--concurrency-sweep and matplotlib: the hinge-llm[bench] extra)")
    hf = parser.add_argument_group("comparison and output")
    hf.add_argument("--compare-hf", action="store_true",
                    help="also run transformers' generate on the same prompts in this process, "
                    "under the same torch thread count, and print the throughput ratio")
    hf.add_argument("--hf-batch-size", type=int, default=0, metavar="N",
                    help="transformers batch size; 0 = --max-concurrency if set, else all "
                    "prompts in one batch (default: %(default)s)")
    hf.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each side N times (alternating with --compare-hf) and report each "
                    "side's fastest run, the one with the shortest wall time "
                    "(default: %(default)s)")
    hf.add_argument("--json", action="store_true",
                    help="print one JSON document alone on stdout; the table goes to stderr")
    hf.add_argument("--disable-tqdm", action="store_true",
                    help="no progress bar (it is drawn on stderr)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ValueError naming the flag for values and combinations that cannot work."""
    for flag in ("num_prompts", "output_len", "repeat"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if not args.request_rate > 0:
        raise ValueError(f"--request-rate must be > 0 requests/s (or inf), got {args.request_rate}")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ValueError(f"--max-concurrency must be >= 1, got {args.max_concurrency}")
    if args.compare_hf:
        if args.url:
            raise ValueError("--compare-hf runs transformers in this process; it cannot be "
                             "combined with --url")
        if not math.isinf(args.request_rate):
            raise ValueError("--compare-hf sends all prompts at once in fixed batches; leave out "
                             "--request-rate (or drop --compare-hf)")
    _check_random_weights(args)
    _check_sweep(args)


def _check_random_weights(args: argparse.Namespace) -> None:
    random_weights = args.random_weights or args.model_config
    if args.model_config and (args.arch or args.size):
        raise ValueError("--model-config gives the whole configuration; leave out --arch/--size")
    if (args.arch or args.size) and not args.random_weights:
        raise ValueError("--arch/--size pick a --random-weights preset; add --random-weights")
    if args.size and args.size not in PRESETS[args.arch or "qwen3"]:
        arch = args.arch or "qwen3"
        raise ValueError(f"--size {args.size!r} is not a {arch} preset; choose one of "
                         f"{', '.join(PRESETS[arch])}")
    if not random_weights:
        return
    for flag, value in (("--model", getattr(args, "model", None)), ("--url", args.url),
                        ("--prompts-file", args.prompts_file)):
        if value:
            raise ValueError(f"--random-weights builds its own model and random-id prompts; it "
                             f"cannot be combined with {flag}")


def _check_sweep(args: argparse.Namespace) -> None:
    if args.sweep_rounds < 1:
        raise ValueError(f"--sweep-rounds must be >= 1, got {args.sweep_rounds}")
    if args.plot and not args.concurrency_sweep:
        raise ValueError("--plot draws a --concurrency-sweep; add --concurrency-sweep "
                         "(e.g. 1,8,64)")
    if not args.concurrency_sweep:
        return
    from hinge.bench.points import parse_concurrencies

    parse_concurrencies(args.concurrency_sweep)
    if args.url:
        raise ValueError("--concurrency-sweep runs the engine in this process; it cannot be "
                         "combined with --url")
    if not math.isinf(args.request_rate) or args.max_concurrency is not None:
        raise ValueError("--concurrency-sweep sets each run's concurrency and sends all its "
                         "prompts at once; leave out --request-rate and --max-concurrency")
    if args.plot:
        if not args.plot.lower().endswith(".png"):
            raise ValueError(f"--plot writes a PNG; give a file name ending in .png, got "
                             f"{args.plot!r}")
        from hinge.bench.plot import require_matplotlib

        require_matplotlib()
