"""Where a short prefill's time goes on the host: the hybrid's 128-token TTFT was 76.5 ms against
the dense model's 8.2 (docs/benchmarks.md, sixth session), its device busy 8.6 ms of it.

For each model (random weights, the real configuration), after the start-up warm-up, one
``--prompt-len`` request at a time: the wall TTFT, and the host time spent inside each kind of
module's ``forward`` (forward hooks with ``perf_counter``; launches are asynchronous, so this is
Python plus launch overhead, not GPU time) summed over the layers, plus the kernels a prefill
launches (``torch.profiler``, CUDA activity only). No cProfile: it inflated the profile of
``roofline.py --profile`` by about a third.

    python3 tools/gpu/prefill_host.py                       # qwen3 8b and qwen3_5 9b
    python3 tools/gpu/prefill_host.py --arch qwen3_5 --size 9b --prompt-len 512
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import time

import torch
from roofline import ttft  # NOTE: the sibling script

from hinge import LLM
from hinge.bench.presets import preset_config
from hinge.bench.random_model import vocab_size, write_random_model


def module_host_times(llm: LLM, prompts: list[list[int]]) -> tuple[dict[str, float], list[float]]:
    """Host seconds a prefill spends in each module class (its own forward, children included),
    averaged over ``prompts``, and each prompt's TTFT."""
    spent: collections.Counter[str] = collections.Counter()
    starts: dict[int, float] = {}
    handles = []
    for module in llm.engine.model.modules():
        if not list(module.children()) and type(module).__name__ in ("Linear", "Embedding"):
            continue  # leaves inside a layer: counted by their layer's module

        def pre(mod, args):
            starts[id(mod)] = time.perf_counter()

        def post(mod, args, out):
            spent[type(mod).__name__] += time.perf_counter() - starts.pop(id(mod), time.perf_counter())

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        times = [ttft(llm, p) for p in prompts]
    finally:
        for h in handles:
            h.remove()
    return {k: v / len(prompts) for k, v in spent.items()}, times


def kernels_per_prefill(llm: LLM, prompt: list[int]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        ttft(llm, prompt)
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=["qwen3", "qwen3_5"])
    ap.add_argument("--size", nargs="+", default=["8b", "9b"])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run (--size tiny tiny)")
    args = ap.parse_args()
    for arch, size in zip(args.arch, args.size, strict=True):
        config = preset_config(arch, size)
        g = torch.Generator().manual_seed(0)
        n = args.repeats  # distinct prompts for each pass: a repeated prompt would hit the cache
        prompts = torch.randint(100, vocab_size(config) - 1, (2 * n + 1, args.prompt_len),
                                generator=g).tolist()
        with tempfile.TemporaryDirectory() as tmp, LLM(
                write_random_model(tmp, config), device=args.device, load_format="dummy",
                dtype="bfloat16" if args.device == "cuda" else "float32", mem_fraction_static=0.35,
                max_model_len=4096) as llm:
            plain = statistics.median(ttft(llm, p) for p in prompts[1:n + 1]) * 1e3
            spent, hooked = module_host_times(llm, prompts[n + 1:])
            launched = kernels_per_prefill(llm, prompts[0]) if args.device == "cuda" else 0
            print(f"\n{arch} {size}, {args.prompt_len}-token prefill: TTFT {plain:.1f} ms (median of "
                  f"{args.repeats}; {statistics.median(hooked) * 1e3:.1f} ms with the hooks), "
                  f"{launched} kernels")
            print("| module | host ms a prefill (children included) |\n| --- | --- |")
            for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:12]:
                print(f"| `{name}` | {seconds * 1e3:.2f} |")


if __name__ == "__main__":
    main()
