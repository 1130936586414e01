"""The ``hinge`` command: generate, serve, bench, plugins, plan, and plugins' commands (quantize).

Each subcommand imports what it needs only when it runs, so ``hinge --help`` and ``hinge plugins``
stay fast. Engine flags map onto ``EngineConfig`` fields; precedence is command line > ``HINGE_*``
environment > ``--config`` YAML > defaults (``hinge.config.load_config``). User errors (bad config,
unknown plugin, missing model files) print one ``hinge: error: ...`` message and exit 2;
``HINGE_DEBUG=1`` shows the traceback instead. Logs go to stderr (``--log-level``,
``HINGE_LOG_LEVEL``; ``hinge.logs``), so stdout holds only a command's output.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.engine.engine import Engine
    from hinge.sampling_params import SamplingParams

EXIT_USAGE = 2
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


class UsageError(ValueError):
    """A command-line value is wrong; the message says which flag and what is allowed."""


# ---------------------------------------------------------------------------------------------
# flags
# ---------------------------------------------------------------------------------------------


def parse_bytes(text: str) -> int:
    """``1073741824``, ``512MiB``, ``2G`` -> bytes (K/M/G/T are powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size like 268435456, 256MiB or 2G, got {text!r}")
    number, unit, _ = match.groups()
    return int(float(number) * 1024 ** " kmgt".index(unit.lower() or " "))


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (EngineConfig; overrides HINGE_* env and --config)")
    group.add_argument("--config", metavar="YAML", help="hinge.yaml with EngineConfig fields")
    group.add_argument("--device", metavar="{auto,cpu,cuda}",
                       help="auto (cuda when torch sees a GPU, the default), cpu or cuda")
    group.add_argument("--dtype", metavar="DTYPE", help="auto, float32, bfloat16 or float16")
    group.add_argument("--attention", metavar="NAME", help="attention backend name (see `hinge plugins`)")
    group.add_argument("--attention-prefill", metavar="NAME",
                       help="attention backend of prefill and mixed steps (default: --attention)")
    group.add_argument("--attention-decode", metavar="NAME",
                       help="attention backend of decode and verify steps (default: --attention)")
    group.add_argument("--quantizer", metavar="NAME", help="quantizer name, or auto")
    group.add_argument("--speculator", metavar="NAME", help="speculator name, or none")
    group.add_argument("--cache", metavar="NAME", help="prefix cache policy name")
    group.add_argument("--deterministic", action="store_true", default=None,
                       help="batch-invariant kernels: results independent of batching")
    group.add_argument("--page-size", type=int, metavar="N",
                       help="tokens per KV page (default: what the attention backends prefer, "
                       "e.g. 128 for fa4, else 16)")
    group.add_argument("--kv-cache-bytes", type=parse_bytes, metavar="SIZE", help="CPU KV/state budget, e.g. 256MiB")
    group.add_argument("--mem-fraction-static", type=float, metavar="X",
                       help="cuda: fraction of GPU memory for weights + KV + state (default 0.85)")
    group.add_argument("--max-running-requests", type=int, metavar="N", help="decode batch cap")
    group.add_argument("--chunked-prefill-size", type=int, metavar="N",
                       help="max new tokens per step (default: 512 on cpu, 8192 on cuda)")
    group.add_argument("--max-model-len", type=int, metavar="N", help="context limit in tokens")
    group.add_argument("--track-interval", type=int, metavar="N",
                       help="prefix cache of hybrid models: a recurrent-state checkpoint every N "
                       "tokens (whole pages; default: 64 on cpu, 256 on cuda)")
    group.add_argument("--checkpoint-slots", type=int, metavar="N",
                       help="recurrent-state checkpoint slots of the prefix cache (default: 2 per "
                       "running request, at most 10%% of the KV+state budget)")
    group.add_argument("--load-format", choices=("auto", "dummy"), default=None,
                       help="auto: the checkpoint's weights; dummy: config.json only, seeded "
                       "random weights (benchmarks of real shapes)")
    group.add_argument("--warmup", choices=("auto", "on", "off"), default=None,
                       help="start-up warm-up requests that compile every kernel before the first "
                       "request (default auto: on cuda)")
    group.add_argument("--gc-freeze", choices=("auto", "on", "off"), default=None,
                       help="freeze the start-up heap out of Python's garbage collector once the "
                       "engine has started, so no full collection walks it (default auto: on cuda)")
    group.add_argument("--strict-plugins", action="store_true", default=None,
                       help="any plugin that fails to load is fatal")
    group.add_argument("--cpu-threads", type=cpu_threads_arg, metavar="N",
                       help="torch intra-op threads on CPU, or auto (default: auto, "
                       "OMP_NUM_THREADS when set; see docs/internals.md)")


def cpu_threads_arg(text: str) -> int | str:
    """``--cpu-threads``: a positive integer or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}")
    return value


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` (every subcommand): hinge's log records on stderr from this level up."""
    from hinge.logs import LEVELS

    parser.add_argument("--log-level", type=str.lower, choices=LEVELS, default=None,
                        help="debug, info, warning or error (default: $HINGE_LOG_LEVEL, else info); "
                        "logs go to stderr")


_ENGINE_FIELDS = ("device", "dtype", "attention", "attention_prefill", "attention_decode",
                  "quantizer", "speculator", "cache", "deterministic",
                  "page_size", "kv_cache_bytes", "mem_fraction_static", "max_running_requests",
                  "chunked_prefill_size", "max_model_len", "cpu_threads", "load_format",
                  "track_interval", "checkpoint_slots", "warmup", "gc_freeze")


def config_from_args(args: argparse.Namespace, model: str | None = None) -> EngineConfig:
    from hinge.config import load_config

    overrides: dict[str, Any] = {name: getattr(args, name, None) for name in _ENGINE_FIELDS}
    if model is not None:
        if not os.path.isdir(model):
            raise UsageError(f"model directory {model!r} does not exist; pass a local Hugging Face "
                             "checkpoint directory, or leave it out for the embedded default model")
        overrides["model"] = model
    if getattr(args, "strict_plugins", None):
        overrides["plugins"] = {"strict": True}
    return load_config(args.config, overrides=overrides)


def check_device(config: EngineConfig) -> None:
    """Fail early and clearly when ``--device cuda`` cannot work on this machine."""
    if config.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            build = "built without CUDA" if torch.version.cuda is None else "sees no GPU"
            raise UsageError(f"device 'cuda' was selected but torch {torch.__version__} {build}; "
                             "use --device cpu (or HINGE_DEVICE=cpu) on this machine")


def add_sampling_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="default 128")
    group.add_argument("--temperature", type=float, default=0.0, metavar="X", help="0 = greedy (default)")
    group.add_argument("--top-p", type=float, default=1.0, metavar="X")
    group.add_argument("--top-k", type=int, default=-1, metavar="K", help="-1 = off")
    group.add_argument("--min-p", type=float, default=0.0, metavar="X")
    group.add_argument("--repetition-penalty", type=float, default=1.0, metavar="X")
    group.add_argument("--frequency-penalty", type=float, default=0.0, metavar="X")
    group.add_argument("--presence-penalty", type=float, default=0.0, metavar="X")
    group.add_argument("--seed", type=int, default=None, metavar="N")
    group.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)")
    group.add_argument("--stop-token-id", type=int, action="append", default=None, metavar="ID",
                       help="stop token id (repeatable)")
    group.add_argument("--ignore-eos", action="store_true")


def sampling_from_args(args: argparse.Namespace) -> SamplingParams:
    from hinge.sampling_params import SamplingParams

    return SamplingParams(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
        frequency_penalty=args.frequency_penalty, presence_penalty=args.presence_penalty,
        seed=args.seed, stop=args.stop, stop_token_ids=args.stop_token_id or [],
        ignore_eos=args.ignore_eos)


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    params = sampling_from_args(args)
    config = config_from_args(args, model=args.model)
    check_device(config)
    from hinge.engine.engine import Engine

    engine = Engine(config)
    try:
        if args.chat:
            prompt_ids = engine.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        else:
            prompt_ids = engine.tokenizer.encode(prompt)
        start = time.perf_counter()
        out = run_request(engine, prompt_ids, params, stream=sys.stdout if args.stream else None)
        elapsed = time.perf_counter() - start
    finally:
        engine.close()
    if not args.stream:
        sys.stdout.write(out.text)
    sys.stdout.write("\n")
    sys.stdout.flush()
    n = len(out.token_ids)
    print(f"[hinge] {len(prompt_ids)} prompt + {n} output tokens in {elapsed:.2f} s "
          f"({n / max(elapsed, 1e-9):.1f} tok/s), finish_reason={out.finish_reason}", file=sys.stderr)
    return 0


def run_request(engine: Engine, prompt_ids: list[int], params: SamplingParams, stream: Any = None):
    """Run one request to the end through ``Engine.add_request``/``step``; with ``stream`` (a text
    file), write each step's ``new_text`` (the engine holds back possible stop-string prefixes)."""
    rid = engine.add_request(list(prompt_ids), params)
    final = None
    while final is None:
        if not engine.has_unfinished():
            raise RuntimeError(f"engine went idle before request {rid} finished")
        for out in engine.step():
            if out.rid != rid:
                continue
            if stream is not None and out.new_text:
                stream.write(out.new_text)
                stream.flush()
            if out.finished:
                final = out
    return final


def cmd_serve(args: argparse.Namespace) -> int:
    if args.model and args.model_flag and args.model != args.model_flag:
        raise UsageError(f"two models given: {args.model!r} and --model {args.model_flag!r}")
    config = config_from_args(args, model=args.model or args.model_flag)
    check_device(config)
    from hinge.server.app import serve

    extra = {}
    if args.max_request_bytes is not None:
        extra["max_request_bytes"] = args.max_request_bytes
    # serve() binds host:port before it loads the model: a busy or bad port is one error line
    result = serve(config, host=args.host, port=args.port, api_key=args.api_key,
                   served_model_names=args.served_model_name,
                   decode_log_interval=args.decode_log_interval,
                   tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
                   **extra)
    return result if isinstance(result, int) else 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from hinge import plugins_cli
    from hinge.config import load_config

    print(plugins_cli.cmd_plugins(args.json, config=load_config(args.config)))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    config = config_from_args(args, model=args.model)
    from hinge import plugins_cli

    print(plugins_cli.cmd_plan(config, args.json))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from hinge import bench

    config = config_from_args(args, model=args.model)
    check_device(config)
    return bench.run(args, config)


# ---------------------------------------------------------------------------------------------
# parser and entry point
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from hinge import __version__

    parser = argparse.ArgumentParser(prog="hinge", description="hinge: a plugin-architected LLM "
                                     "inference engine. With no model, the embedded default runs.")
    parser.add_argument("--version", action="version", version=f"hinge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    gen = sub.add_parser("generate", help="complete one prompt")
    gen.add_argument("prompt", metavar="PROMPT", help="text to complete ('-' reads stdin)")
    gen.add_argument("--model", metavar="PATH", help="local HF checkpoint dir (default: embedded model)")
    gen.add_argument("--chat", action="store_true", help="wrap PROMPT as a user message and apply "
                     "the model's chat template")
    gen.add_argument("--stream", action="store_true", help="print text as tokens are produced")
    add_sampling_flags(gen)
    add_engine_flags(gen)
    gen.set_defaults(func=cmd_generate)

    srv = sub.add_parser("serve", help="HTTP server: sglang-native and OpenAI-compatible API")
    srv.add_argument("model", nargs="?", metavar="MODEL", help="local HF checkpoint dir")
    srv.add_argument("--model", dest="model_flag", help="same as MODEL")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                     "127.0.0.1, this machine only; 0.0.0.0 for every interface)")
    srv.add_argument("--port", type=int, default=30000, help="0-65535, default 30000 (0: any "
                     "free port); bound before the model loads")
    srv.add_argument("--api-key", default=os.environ.get("HINGE_API_KEY"),
                     help="require `Authorization: Bearer KEY` (default: $HINGE_API_KEY)")
    srv.add_argument("--max-request-bytes", type=parse_bytes, default=None,
                     help="refuse larger request bodies with 413")
    srv.add_argument("--served-model-name", nargs="+", metavar="NAME", default=None,
                     help="the model's name(s) in /v1/models and responses; a request's `model` "
                     "must be one of them or 'default' (default: the model path); give MODEL "
                     "before this flag")
    srv.add_argument("--decode-log-interval", type=int, default=40, metavar="N",
                     help="log a 'Decode batch.' stats line every N decode steps, as sglang "
                     "(default 40; 0: none)")
    srv.add_argument("--tool-call-parser", metavar="NAME", default=None,
                     help="tool-call format of the model's replies: hermes (Qwen3) or qwen3_xml "
                     "(Qwen3.5); default: from the chat template")
    srv.add_argument("--reasoning-parser", metavar="NAME", default=None,
                     help="qwen3 or deepseek_r1: return <think> text as reasoning_content")
    add_engine_flags(srv)
    srv.set_defaults(func=cmd_serve)

    plg = sub.add_parser("plugins", help="list installed plugins, their components and status")
    plg.add_argument("--json", action="store_true")
    plg.add_argument("--config", metavar="YAML", help="hinge.yaml (its plugins allow/block list)")
    plg.set_defaults(func=cmd_plugins)

    pln = sub.add_parser("plan", help="show the resolved components and graph decisions "
                         "(loads no weights)")
    pln.add_argument("--json", action="store_true")
    pln.add_argument("--model", help="local HF checkpoint dir (default: embedded model)")
    add_engine_flags(pln)
    pln.set_defaults(func=cmd_plan)

    from hinge.bench import add_arguments as add_bench_arguments

    bch = sub.add_parser("bench", help="offline throughput/latency on synthetic or file prompts")
    bch.add_argument("--model", help="local HF checkpoint dir (default: embedded model)")
    add_bench_arguments(bch)
    add_engine_flags(bch)
    bch.set_defaults(func=cmd_bench)
    from hinge.plugins.commands import add_plugin_commands

    add_plugin_commands(sub)  # e.g. `hinge quantize` (plugin nvfp4), hookspec register_commands
    for command in sub.choices.values():
        add_log_flags(command)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ValueError, FileNotFoundError, NotADirectoryError]
    try:
        from hinge.plugins.manager import PluginError

        errors.append(PluginError)
    except ImportError:
        pass
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    from hinge.logs import configure_logging, resolve_level

    args = build_parser().parse_args(argv)
    try:
        args.log_level = resolve_level(args.log_level)  # resolved, e.g. for uvicorn's own level
        configure_logging(args.log_level)
        return args.func(args)
    except KeyboardInterrupt:
        print("hinge: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except _user_errors() as exc:
        if os.environ.get("HINGE_DEBUG"):
            raise
        print(f"hinge: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
