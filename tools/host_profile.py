"""The engine's own host time per step (scheduler, batch builder, runner, sampler, outputs), from
cProfile over engine steps on the CPU with the embedded default model: where the Python between
two replays goes, measured without a GPU (the model's torch ops are left out of the total).

    python tools/host_profile.py                 # 64 greedy requests, 20 steps
    python tools/host_profile.py sampled --batch 16
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams

#: the files whose functions count as the engine's host work
ENGINE_FILES = ("/engine/", "batching.py", "sampling_params", "/cache_radix/", "static_batch")
SAMPLED = dict(temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1, logprobs=True, seed=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sampling", nargs="?", choices=("greedy", "sampled"), default="greedy")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    engine = Engine(EngineConfig(device="cpu", kv_cache_bytes=256 << 20,
                                 max_running_requests=args.batch), progress=False)
    extra = SAMPLED if args.sampling == "sampled" else dict(temperature=0.0)
    for i in range(args.batch):
        engine.add_request([5 + i % 50, 6, 7, 8, 9, 10, 11, 12], SamplingParams(
            max_new_tokens=10 * args.steps, ignore_eos=True, detokenize=False, **extra))
    for _ in range(5):  # admitted, prefilled, decoding
        engine.step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        engine.step()
    prof.disable()
    rows = [(k, v) for k, v in pstats.Stats(prof).stats.items() if any(f in k[0] for f in ENGINE_FILES)]
    print(f"engine-side host time: {sum(v[2] for _, v in rows) / args.steps * 1e6:.0f} us a step "
          f"(own time under cProfile, {args.batch} {args.sampling} requests, {args.steps} steps)")
    for (file, line, name), (_, calls, own, cum, _) in sorted(rows, key=lambda kv: -kv[1][2])[:15]:
        print(f"{own / args.steps * 1e6:8.0f} us own {cum / args.steps * 1e6:8.0f} us cum "
              f"{calls / args.steps:7.1f} calls  {file.split('/')[-1]}:{line} {name}")


if __name__ == "__main__":
    main()
