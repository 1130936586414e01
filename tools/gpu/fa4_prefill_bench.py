"""Issue 14's prefill through ``hinge bench``: 8192-token prompts of the Qwen3-8B configuration
(random weights), 128-token pages, ``chunked_prefill_size`` 8192, one request at a time, one
output token, with ``attention`` fa4 and flashinfer, in one run.

The time to first token of such a request is its prefill (one chunk) plus one sampling step;
the model's FLOPs are ``2 P T`` for the P non-embedding weights (GEMMs, lm_head of the last
token aside) plus the causal attention's ``2 T^2 D H`` per layer. Printed: TTFT (median of
``--num-prompts``), prefill tokens/s, and the model's TFLOP/s against the bf16 matmul rate
measured in the same run (issue 14: the attention's own share of the matmul rate is
``fa4_attention.py``'s figure; this is the whole prefill through the engine).

    python3 tools/gpu/fa4_prefill_bench.py            # prints a markdown table
    OUT=/tmp/out python3 tools/gpu/fa4_prefill_bench.py  # also $OUT/fa4_prefill_bench.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch
from fa4_attention import matmul_tflops  # NOTE: the sibling script
from out_json import save_json  # NOTE: the sibling module (tools/gpu is sys.path[0])


def model_flops(config: dict, tokens: int) -> float:
    """``2 P T`` over the layers' weights plus causal attention's ``2 T^2 D H`` a layer."""
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim") or h // heads
    per_layer = h * d * (heads + 2 * kv) + heads * d * h + 3 * h * config["intermediate_size"]
    return 2 * per_layer * layers * tokens + layers * 2 * tokens**2 * d * heads


def bench(attention: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-c", "from hinge.cli import main; raise SystemExit(main())", "bench", "--device", "cuda", "--random-weights",
           "--arch", "qwen3", "--size", args.size, "--attention", attention, "--page-size", "128",
           "--chunked-prefill-size", str(args.tokens), "--max-model-len", str(args.tokens + 64),
           "--num-prompts", str(args.num_prompts), "--input-len-range", f"{args.tokens},{args.tokens}",
           "--output-len", "1", "--max-concurrency", "1", "--json", "--disable-tqdm",
           "--mem-fraction-static", "0.5"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if run.returncode:
        return {"attention": attention, "error": run.stderr[-2000:]}
    result = json.loads(run.stdout)["results"][0]
    return {"attention": attention, "ttft_ms": result["ttft_ms"]["p50"], "failed": result["failed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="8b")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--num-prompts", type=int, default=5)
    parser.add_argument("--attention", nargs="+", default=["fa4", "flashinfer"])
    parser.add_argument("--timeout", type=int, default=240)
    args = parser.parse_args()
    from hinge.bench import preset_config

    config = preset_config("qwen3", args.size)
    peak = matmul_tflops()
    flops = model_flops(config, args.tokens)
    print(f"{torch.cuda.get_device_name()}: bf16 matmul {peak:.0f} TFLOP/s; qwen3 {args.size}, "
          f"{args.tokens}-token prompts: {flops / 1e12:.1f} TFLOP a prefill")
    rows = [bench(name, args) for name in args.attention]
    print("\n| attention | TTFT ms (p50) | prefill tok/s | model TFLOP/s | of matmul |\n"
          "| --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['attention']} | failed: {r['error'].splitlines()[-1][:120]} | | | |")
            continue
        seconds = r["ttft_ms"] / 1e3
        r.update(tok_s=args.tokens / seconds, tflops=flops / seconds / 1e12)
        print(f"| {r['attention']} | {r['ttft_ms']:.1f} | {r['tok_s']:.0f} | {r['tflops']:.0f} | "
              f"{r['tflops'] / peak:.0%} |")
    save_json("fa4_prefill_bench.json", {"device": torch.cuda.get_device_name(),
                                         "matmul_tflops": peak, "flops": flops, "rows": rows})


if __name__ == "__main__":
    main()
