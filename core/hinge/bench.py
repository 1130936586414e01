"""``hinge bench``: offline throughput and latency, optionally against transformers in the same run.

All prompts are submitted at once and the engine steps until every request is done (continuous
batching decides the batches). Every request produces exactly ``--output-len`` tokens (greedy,
eos ignored) so both sides do the same work. With ``--compare-hf`` the same token prompts go
through transformers' greedy ``generate`` in batches of ``--hf-batch-size`` with left padding
(``min_new_tokens = max_new_tokens``), after a warm-up on both sides; model loading is not timed.
With ``--repeat N`` the two sides run alternately N times and each reports its fastest run, so a
burst of load from other processes on the machine does not decide the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.engine.tokenizer import Tokenizer


@dataclass
class BenchResult:
    name: str
    num_requests: int
    input_tokens: int
    output_tokens: int
    wall_s: float
    ttft_ms: float | None = None  #: mean time from submission to the first output token
    tpot_ms: float | None = None  #: mean time per output token after the first
    outputs: list[list[int]] = field(default_factory=list, repr=False)
    note: str = ""

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def total_tok_s(self) -> float:
        return (self.input_tokens + self.output_tokens) / self.wall_s


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--input-len-range", default="16,128", metavar="MIN,MAX",
                        help="synthetic prompt lengths in tokens, drawn uniformly")
    parser.add_argument("--output-len", type=int, default=64, help="output tokens per request")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic prompts")
    parser.add_argument("--prompts-file", help="text prompts instead of synthetic ones: one per "
                        "line, or .jsonl lines with a 'prompt' field")
    parser.add_argument("--compare-hf", action="store_true",
                        help="also run transformers' generate on the same prompts and print the ratio")
    parser.add_argument("--hf-batch-size", type=int, default=0,
                        help="transformers batch size (default: all prompts in one batch)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each side N times, alternating, and report the fastest run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")


def parse_len_range(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--input-len-range must be MIN,MAX (e.g. 16,128), got {text!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"--input-len-range needs 1 <= MIN <= MAX, got {text!r}")
    return lo, hi


def synthetic_prompts(tokenizer: Tokenizer, num: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    """``num`` prompts of random ordinary (non-special) token ids, lengths uniform in [lo, hi]."""
    special = set(tokenizer.backend.get_added_tokens_decoder())
    ordinary = [i for i in range(tokenizer.vocab_size) if i not in special]
    rng = random.Random(seed)
    return [[rng.choice(ordinary) for _ in range(rng.randint(lo, hi))] for _ in range(num)]


def file_prompts(path: str, tokenizer: Tokenizer) -> list[list[int]]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--prompts-file {path} does not exist")
    lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if file.suffix == ".jsonl":
        try:
            lines = [json.loads(line)["prompt"] for line in lines]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: every line must be a JSON object with 'prompt': {exc}") from None
    if not lines:
        raise ValueError(f"--prompts-file {path} holds no prompts")
    return [tokenizer.encode(line) for line in lines]


def bench_hinge(engine: Any, prompts: list[list[int]], output_len: int) -> BenchResult:
    from hinge.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True)
    _drain(engine, [prompts[0][:8]], SamplingParams(max_new_tokens=4, temperature=0.0))  # warm-up
    start = time.perf_counter()
    first: dict[str, float] = {}
    done: dict[str, tuple[float, list[int]]] = {}
    rids = [engine.add_request(list(p), params) for p in prompts]
    while engine.has_unfinished():
        for out in engine.step():
            now = time.perf_counter()
            if out.token_ids and out.rid not in first:
                first[out.rid] = now
            if out.finished:
                done[out.rid] = (now, list(out.token_ids))
    wall = time.perf_counter() - start
    outputs = [done[r][1] for r in rids]
    ttft = [first[r] - start for r in rids]
    tpot = [(done[r][0] - first[r]) / (len(done[r][1]) - 1) for r in rids if len(done[r][1]) > 1]
    return BenchResult("hinge", len(prompts), sum(map(len, prompts)), sum(map(len, outputs)), wall,
                       ttft_ms=1e3 * sum(ttft) / len(ttft),
                       tpot_ms=1e3 * sum(tpot) / len(tpot) if tpot else None, outputs=outputs,
                       note="all requests submitted at once; continuous batching")


def _drain(engine: Any, prompts: list[list[int]], params: Any) -> None:
    for p in prompts:
        engine.add_request(list(p), params)
    while engine.has_unfinished():
        engine.step()


def load_hf(model_path: str, *, device: str, dtype: Any) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()


def bench_hf(model: Any, prompts: list[list[int]], output_len: int, *, batch_size: int,
             pad_id: int) -> BenchResult:
    import torch

    device = str(model.device)
    batch_size = batch_size or len(prompts)

    def generate(batch: list[list[int]], new_tokens: int) -> list[list[int]]:
        width = max(map(len, batch))
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=pad_id)
        return out[:, width:].tolist()

    generate([prompts[0][:8]], 4)  # warm-up
    outputs: list[list[int]] = []
    wall = 0.0
    ttft: list[float] = []
    tpot: list[float] = []
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i:i + batch_size]
        # NOTE: generate() streams nothing for a batch, so time to first token is measured by a
        # separate 1-token generate of the same batch; it is not counted in the wall time.
        prefill = _timed(device, lambda b=batch: generate(b, 1))[1]
        batch_out, full = _timed(device, lambda b=batch: generate(b, output_len))
        ttft += [wall + prefill] * len(batch)
        if output_len > 1:
            tpot += [max(full - prefill, 0.0) / (output_len - 1)] * len(batch)
        wall += full
        outputs.extend(batch_out)
    return BenchResult("transformers", len(prompts), sum(map(len, prompts)),
                       sum(map(len, outputs)), wall, ttft_ms=1e3 * sum(ttft) / len(ttft),
                       tpot_ms=1e3 * sum(tpot) / len(tpot) if tpot else None, outputs=outputs,
                       note=f"batched model.generate (greedy, KV cache, {batch_size} prompts per call, "
                       "left padding); TTFT from a separate 1-token generate of each batch")


def _timed(device: str, fn: Any) -> tuple[Any, float]:
    _sync(device)
    start = time.perf_counter()
    result = fn()
    _sync(device)
    return result, time.perf_counter() - start


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def format_table(results: list[BenchResult]) -> str:
    def fmt(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    rows = [("requests", [str(r.num_requests) for r in results]),
            ("input tokens", [str(r.input_tokens) for r in results]),
            ("output tokens", [str(r.output_tokens) for r in results]),
            ("wall time (s)", [fmt(r.wall_s, 3) for r in results]),
            ("output tok/s", [fmt(r.output_tok_s, 1) for r in results]),
            ("total tok/s", [fmt(r.total_tok_s, 1) for r in results]),
            ("mean TTFT (ms)", [fmt(r.ttft_ms, 1) for r in results]),
            ("mean per-token latency (ms)", [fmt(r.tpot_ms, 2) for r in results])]
    width = max(len(name) for name, _ in rows) + 2
    lines = [" " * width + "".join(f"{r.name:>16}" for r in results)]
    lines += [name.ljust(width) + "".join(f"{v:>16}" for v in values) for name, values in rows]
    lines += [f"{r.name}: {r.note}" for r in results if r.note]
    return "\n".join(lines)


def run(args: argparse.Namespace, config: EngineConfig) -> int:
    if args.num_prompts < 1 or args.output_len < 1 or args.repeat < 1:
        raise ValueError("--num-prompts, --output-len and --repeat must be >= 1")
    from hinge.engine.engine import Engine

    engine = Engine(config)
    try:
        if args.prompts_file:
            prompts = file_prompts(args.prompts_file, engine.tokenizer)
        else:
            lo, hi = parse_len_range(args.input_len_range)
            prompts = synthetic_prompts(engine.tokenizer, args.num_prompts, lo, hi, args.seed)
        pad_id = engine.tokenizer.pad_token_id
        pad_id = pad_id if pad_id is not None else (engine.tokenizer.eos_token_ids or [0])[0]
        hf_model = None
        if args.compare_hf:
            from hinge.builtin import default_model_path

            hf_model = load_hf(str(config.model or default_model_path()), device=config.device,
                               dtype=config.torch_dtype())
        runs: list[list[BenchResult]] = []
        for _ in range(args.repeat):  # alternate the sides so load bursts hit both alike
            runs.append([bench_hinge(engine, prompts, args.output_len)])
            if hf_model is not None:
                runs[-1].append(bench_hf(hf_model, prompts, args.output_len,
                                         batch_size=args.hf_batch_size, pad_id=pad_id))
    finally:
        engine.close()
    results = [min((r[i] for r in runs), key=lambda r: r.wall_s) for i in range(len(runs[0]))]
    summary: dict[str, Any] = {}
    if hf_model is not None:
        ours, hf = results
        summary = {
            "output_throughput_ratio": ours.output_tok_s / hf.output_tok_s,
            "identical_outputs": sum(a == b for a, b in zip(ours.outputs, hf.outputs, strict=True)),
        }
    best = f", fastest of {args.repeat} alternating runs" if args.repeat > 1 else ""
    import torch

    print(f"model: {config.model or 'embedded default'}; device {config.device}, dtype "
          f"{config.resolved_dtype}, torch threads {torch.get_num_threads()}; {len(prompts)} "
          f"prompts, {args.output_len} output tokens each{best}")
    print(format_table(results))
    if summary:
        print(f"hinge / transformers output throughput: {summary['output_throughput_ratio']:.2f}x "
              f"(same prompts, same run); identical greedy outputs: "
              f"{summary['identical_outputs']}/{len(prompts)}")
    if args.json:
        data = [{k: v for k, v in asdict(r).items() if k != "outputs"} |
                {"output_tok_s": r.output_tok_s, "total_tok_s": r.total_tok_s} for r in results]
        json.dump({"results": data, **summary}, sys.stdout)
        print()
    return 0
