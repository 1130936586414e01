"""Issue 10's benchmark: decode as a fraction of the memory roofline, against transformers, one run.

    python tools/gpu/roofline.py --arch qwen3 --size 8b --arch2 qwen3_5 --size2 9b
    OUT=/tmp/out python tools/gpu/roofline.py ...        # also $OUT/roofline.json
    python tools/gpu/roofline.py --profile ...           # + kernel breakdowns (step_profile.py)

For each model (a ``hinge.bench`` preset, random weights built on the GPU, nothing downloaded):

- **copy bandwidth** of this card, measured in this run (device-to-device copy of 4 GiB, bytes read
  plus written over the best time of 10);
- **bytes per decode step** of a batch of B: every weight the step reads (all parameters but the
  input embedding table, of which it reads B rows; a tied table counts once, as the lm_head) + B
  times the KV bytes at the mean context of the timed window + B times the recurrent state bytes
  (read and written, float32) of a hybrid. Roofline tokens/s = B x bandwidth / bytes;
- **batch 1**: one request, ``--prompt-len`` prompt, ``--b1-tokens`` new tokens; tokens/s = 1 /
  median time between its tokens;
- **batch 64**: 64 requests at once; decode tokens/s = tokens over the steps where all 64 decode,
  per second; output tokens/s over the wall (prefill included) against transformers ``generate``
  of the same 64 prompts (one batch, greedy, same new-token count) in the same process;
- modes side by side: default and deterministic engines, each greedy and sampled (temperature
  0.7, top-p 0.9, top-k 50, repetition penalty 1.1, logprobs on);
- **TTFT** of the first request after start-up against the median of 5 warm requests.

Prints a markdown table per model last. Goals (issue 10): batch-1 default >= 85% of the roofline,
deterministic >= 50%; batch 64 >= 10x transformers and >= 60% of its roofline; first TTFT <= 2x warm.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from typing import Any

import torch
from out_json import save_json  # NOTE: the sibling module (tools/gpu is sys.path[0])

from hinge import LLM, SamplingParams
from hinge.bench.presets import preset_config
from hinge.bench.random_model import vocab_size, write_random_model

SAMPLED = dict(temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1, logprobs=True)


def copy_bandwidth(gib: float = 4.0, reps: int = 10) -> float:
    """Bytes per second of a device-to-device copy (read + write), best of ``reps``."""
    n = int(gib * (1 << 30)) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(reps + 2):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n * 2 / best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a decode step reads of the weights: all parameters but an untied input embedding."""
    total, seen = 0, set()
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * p.element_size()
    embed = next((m for n, m in model.named_modules() if n.endswith("embed_tokens")), None)
    head = next((m for n, m in model.named_modules() if n.endswith("lm_head")), None)
    if embed is not None and head is not None and getattr(embed, "weight", None) is not None \
            and getattr(head, "weight", None) is not None \
            and embed.weight.data_ptr() != head.weight.data_ptr():
        total -= embed.weight.numel() * embed.weight.element_size()
    return total


def per_token_bytes(config: dict[str, Any], elem: int = 2) -> tuple[int, int]:
    """(KV bytes per cached position, recurrent-state bytes read + written per request per step)."""
    layers = config["num_hidden_layers"]
    kinds = config.get("layer_types") or ["full_attention"] * layers
    attn = sum(k == "full_attention" for k in kinds)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv = attn * 2 * config["num_key_value_heads"] * head_dim * elem
    state = 0
    linear = layers - attn
    if linear:
        nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
        dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
        conv = (2 * nk * dk + nv * dv) * (config.get("linear_conv_kernel_dim", 4) - 1)
        state = linear * 2 * 4 * (nv * dk * dv + conv)  # float32, read and written
    return kv, state


def run_engine(llm: LLM, prompts: list[list[int]], params: SamplingParams
               ) -> tuple[list[float], list[int], float]:
    """Add every prompt, step to the end: (time of each step's return, tokens it delivered, wall)."""
    engine = llm.engine
    for p in prompts:
        engine.add_request(list(p), params)
    stamps, counts = [], []
    start = time.perf_counter()
    while engine.has_unfinished():
        outs = engine.step()
        stamps.append(time.perf_counter())
        counts.append(sum(len(o.new_token_ids) for o in outs))
    return stamps, counts, stamps[-1] - start


def decode_rate(stamps: list[float], counts: list[int], batch: int) -> float:
    """Tokens per second over the steps where all ``batch`` requests decode (median step time)."""
    full = [i for i, c in enumerate(counts) if c == batch]
    gaps = [stamps[i] - stamps[i - 1] for i in full[1:] if i - 1 in full]
    if not gaps:
        return float("nan")
    return batch / statistics.median(gaps)


def ttft(llm: LLM, prompt: list[int]) -> float:
    engine = llm.engine
    engine.add_request(list(prompt), SamplingParams(max_new_tokens=1, temperature=0.0,
                                                    ignore_eos=True, detokenize=False))
    start = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - start


def bench_model(arch: str, size: str, args: argparse.Namespace, bandwidth: float) -> dict[str, Any]:
    config = preset_config(arch, size)
    vocab = vocab_size(config)
    g = torch.Generator().manual_seed(0)

    def prompts(n: int, length: int) -> list[list[int]]:
        return torch.randint(100, vocab - 1, (n, length), generator=g).tolist()

    kv_tok, state_req = per_token_bytes(config)
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"model": f"{arch} {size}", "kv_bytes_per_position": kv_tok,
                              "state_bytes_per_request_step": state_req, "rows": rows}
    b64_prompts = prompts(args.batch, args.prompt_len)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_model(tmp, config)
        hf_tok_s = float("nan")
        if not args.skip_hf:
            from hinge.bench.hf import bench_hf, build_hf_random
            model = build_hf_random(str(path), device="cuda", dtype=torch.bfloat16)
            hf = bench_hf(model, b64_prompts, args.b64_tokens, batch_size=args.batch, pad_id=0)
            hf_tok_s = hf.output_tok_s
            del model, hf
            gc.collect()
            torch.cuda.empty_cache()
        result["hf_batch_tok_s"] = hf_tok_s
        for mode in args.modes:
            t0 = time.perf_counter()
            with LLM(str(path), device="cuda", load_format="dummy", dtype="bfloat16", attention="auto",
                     attention_options=json.loads(args.attention_options),
                     deterministic=(mode == "deterministic"), mem_fraction_static=args.mem_fraction,
                     max_running_requests=max(args.batch, 8), max_model_len=4096) as llm:
                start_s = time.perf_counter() - t0
                first = ttft(llm, prompts(1, args.prompt_len)[0])
                warm = statistics.median(ttft(llm, p) for p in prompts(5, args.prompt_len))
                wbytes = weight_bytes(llm.engine.model)
                result["weight_bytes"] = wbytes
                result.setdefault("plan", {})[mode] = llm.engine.plan.describe()
                for kind in ("greedy", "sampled"):
                    extra = SAMPLED if kind == "sampled" else dict(temperature=0.0)
                    p1 = SamplingParams(max_new_tokens=args.b1_tokens, ignore_eos=True,
                                        detokenize=False, seed=1, **extra)
                    s, c, _ = run_engine(llm, prompts(1, args.prompt_len), p1)
                    b1 = decode_rate(s, c, 1)
                    ctx = args.prompt_len + args.b1_tokens / 2
                    roof1 = bandwidth / (wbytes + kv_tok * ctx + state_req)
                    p64 = SamplingParams(max_new_tokens=args.b64_tokens, ignore_eos=True,
                                         detokenize=False, seed=1, **extra)
                    s, c, wall = run_engine(llm, b64_prompts, p64)
                    b = args.batch
                    dec = decode_rate(s, c, b)
                    ctx = args.prompt_len + args.b64_tokens / 2
                    roof64 = b * bandwidth / (wbytes + b * (kv_tok * ctx + state_req))
                    out_tok_s = b * args.b64_tokens / wall
                    rows.append({"mode": mode, "sampling": kind, "b1_tok_s": b1,
                                 "b1_roofline_tok_s": roof1, "b1_fraction": b1 / roof1,
                                 "b64_decode_tok_s": dec, "b64_roofline_tok_s": roof64,
                                 "b64_fraction": dec / roof64, "b64_output_tok_s": out_tok_s,
                                 "vs_hf": out_tok_s / hf_tok_s if hf_tok_s == hf_tok_s else None,
                                 "first_ttft_ms": first * 1e3, "warm_ttft_ms": warm * 1e3,
                                 "startup_s": start_s})
                    print(json.dumps({"model": result["model"], **rows[-1]}), flush=True)
                for kind in args.profile or []:  # where a decode step's time goes, batch 1 and B
                    from step_profile import profile_decode  # NOTE: the sibling script

                    extra = SAMPLED if kind == "sampled" else dict(temperature=0.0)
                    params = SamplingParams(max_new_tokens=args.b1_tokens, ignore_eos=True,
                                            detokenize=False, seed=1, **extra)
                    for b in (1, args.batch):
                        prof = profile_decode(llm.engine, prompts(b, args.prompt_len), params)
                        result.setdefault("profiles", []).append({"mode": f"{mode} {kind}", **prof})
                if args.profile:  # and where the first token's time goes (one request, greedy)
                    from step_profile import profile_prefill

                    one = SamplingParams(max_new_tokens=1, temperature=0.0, detokenize=False)
                    prof = profile_prefill(llm.engine, prompts(1, args.prompt_len)[0], one)
                    result.setdefault("profiles", []).append({"mode": f"{mode} prefill", **prof})
            gc.collect()
            torch.cuda.empty_cache()
    return result


def table(result: dict[str, Any], bandwidth: float) -> str:
    lines = [f"\n{result['model']} (random weights, bf16): weights read per step "
             f"{result['weight_bytes'] / 1e9:.2f} GB, KV {result['kv_bytes_per_position']} B/position, "
             f"state {result['state_bytes_per_request_step']} B/request-step, copy bandwidth "
             f"{bandwidth / 1e12:.2f} TB/s, transformers batch {len(result['rows']) and 64}: "
             f"{result['hf_batch_tok_s']:.0f} tok/s",
             "| mode | sampling | b1 tok/s | b1 roofline | b1 % | b64 decode tok/s | b64 % | "
             "b64 out tok/s | x transformers | first TTFT ms | warm TTFT ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        vs = f"{r['vs_hf']:.1f}" if r["vs_hf"] else "-"
        lines.append(f"| {r['mode']} | {r['sampling']} | {r['b1_tok_s']:.1f} | "
                     f"{r['b1_roofline_tok_s']:.1f} | {100 * r['b1_fraction']:.1f} | "
                     f"{r['b64_decode_tok_s']:.0f} | {100 * r['b64_fraction']:.1f} | "
                     f"{r['b64_output_tok_s']:.0f} | {vs} | {r['first_ttft_ms']:.1f} | "
                     f"{r['warm_ttft_ms']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="qwen3")
    ap.add_argument("--size", default="8b")
    ap.add_argument("--arch2", default=None, help="a second model, e.g. qwen3_5")
    ap.add_argument("--size2", default=None)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--b1-tokens", type=int, default=256)
    ap.add_argument("--b64-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--modes", nargs="+", default=["default", "deterministic"])
    ap.add_argument("--mem-fraction", type=float, default=0.35)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--attention-options", default="{}",
                    help='JSON for the attention backend, e.g. \'{"decode_split_kv": "auto"}\'')
    ap.add_argument("--profile", nargs="*", choices=("greedy", "sampled"), default=None,
                    help="also profile decode steps at batch 1 and --batch (step_profile.py) for "
                    "these samplings (no value: greedy)")
    args = ap.parse_args()
    if args.profile == []:
        args.profile = ["greedy"]
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s on {torch.cuda.get_device_name()}", flush=True)
    results = [bench_model(args.arch, args.size, args, bandwidth)]
    if args.arch2:
        results.append(bench_model(args.arch2, args.size2, args, bandwidth))
    stamp = {"date": time.strftime("%Y-%m-%d"), "card": torch.cuda.get_device_name(),
             "torch": torch.__version__, "bandwidth": bandwidth, "results": results}
    save_json("roofline.json", stamp, indent=1)
    for r in results:
        if r.get("profiles"):
            from step_profile import table as profile_table

            for prof in r["profiles"]:
                print(profile_table(prof, f"{r['model']} {prof['mode']}"))
    for r in results:
        print(table(r, bandwidth))


if __name__ == "__main__":
    main()
