"""TTFT of a 4k-token prompt with 3.9k tokens in the radix cache, against cold (issue 11's
benchmark; goal: warm <= 15% of cold). Random weights at a real shape (``hinge.bench`` presets:
nothing is downloaded), one request at a time, CUDA graphs as the plan allows.

Run on the GPU host from the repository root:

    python tools/gpu/radix_ttft.py --arch qwen3 --size 8b
    python tools/gpu/radix_ttft.py --arch qwen3_5 --size 9b --json

Per round: flush the cache; time the 4096-token prompt cold (add -> first token); flush; fill the
cache with its first 3900 tokens (a prefill-only request); time the same prompt warm. The first
round warms kernels up and is not counted. Prints the median TTFTs, the cached tokens of the warm
runs (hybrids hit the last checkpoint on the track_interval grid: 3840 with 256) and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from hinge import LLM, SamplingParams
from hinge.bench.presets import preset_config
from hinge.bench.random_model import vocab_size, write_random_model


def ttft(llm: LLM, prompt: list[int]) -> tuple[float, int]:
    """Seconds from add_request to the first token, and the request's cached tokens."""
    engine = llm.engine
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    rid = engine.add_request(prompt, SamplingParams(max_new_tokens=2, temperature=0, ignore_eos=True))
    first = None
    while engine.has_unfinished():
        for out in engine.step():
            if out.rid == rid and first is None and out.new_token_ids:
                first = time.perf_counter() - start, out.cached_tokens
    assert first is not None
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="qwen3")
    ap.add_argument("--size", default="8b")
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--cached", type=int, default=3900)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--attention", default="auto")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (tiny presets)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    config = preset_config(args.arch, args.size)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_model(tmp, config)
        g = torch.Generator().manual_seed(0)
        prompt = torch.randint(100, min(20000, vocab_size(config)), (args.prompt,), generator=g).tolist()
        cold, warm, cached = [], [], []
        with LLM(str(path), device=args.device, load_format="dummy", attention=args.attention,
                 max_model_len=8192, max_running_requests=8) as llm:
            for r in range(args.rounds + 1):
                assert llm.engine.flush_cache()
                c, _ = ttft(llm, prompt)
                assert llm.engine.flush_cache()
                llm.generate([prompt[:args.cached]], SamplingParams(max_new_tokens=0))
                w, hit = ttft(llm, prompt)
                if r:  # round 0 warms up
                    cold.append(c)
                    warm.append(w)
                    cached.append(hit)
            plan = llm.engine.plan.describe()
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    result = {"model": f"{args.arch} {args.size} (random weights)", "device": device,
              "prompt_tokens": args.prompt, "cached_tokens": cached,
              "cold_ttft_ms": statistics.median(cold) * 1e3, "warm_ttft_ms": statistics.median(warm) * 1e3,
              "ratio": statistics.median(warm) / statistics.median(cold), "plan": plan}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['model']} on {result['device']}: {args.prompt}-token prompt, cached {cached}")
        print(f"  cold TTFT {result['cold_ttft_ms']:.1f} ms, warm {result['warm_ttft_ms']:.1f} ms, "
              f"ratio {result['ratio']:.3f} (goal <= 0.15)")


if __name__ == "__main__":
    main()
