"""Where a decode step waits for the GPU: every synchronizing CUDA call of a few steady-state
decode steps, by the stack that made it (``torch.cuda.set_sync_debug_mode``), for greedy and
sampled requests on a tiny checkpoint (sync points do not depend on the model's size).

    python3 tools/gpu/sync_points.py [--arch qwen3] [--batch 4] [--steps 4]

A step should sync once (its tokens to the host); each other line is device idle time the host
spends waiting (docs/benchmarks.md: sampled decode's idle time).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import traceback
import warnings

import torch

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

KINDS = {
    "greedy": dict(temperature=0.0),
    "sampled": dict(temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1, logprobs=True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", nargs="+", default=["qwen3", "qwen3_5"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--deterministic", action="store_true")
    args = ap.parse_args()
    for arch in args.arch:
        path = make_tiny_checkpoint(arch, tempfile.mkdtemp(), seed=0)
        write_byte_tokenizer(path)
        engine = Engine(EngineConfig(model=str(path), device="cuda", dtype="bfloat16",
                                     deterministic=args.deterministic), progress=False)
        for kind, extra in KINDS.items():
            for i in range(args.batch):
                engine.add_request([3 + i] * 20, SamplingParams(max_new_tokens=64, ignore_eos=True,
                                                               seed=i, **extra))
            for _ in range(4):  # prefill and the first decode steps
                engine.step()
            seen: collections.Counter[str] = collections.Counter()

            def hook(message, category, filename, lineno, file=None, line=None, seen=seen):
                frames = [f for f in traceback.extract_stack()[:-1] if "/hinge/" in f.filename]
                where = " <- ".join(f"{f.filename.split('/hinge/')[-1]}:{f.lineno} {f.name}"
                                    for f in reversed(frames[-4:]))
                seen[f"{str(message)[:60]} @ {where}"] += 1

            old = warnings.showwarning
            warnings.showwarning = hook
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(args.steps):
                    engine.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
                warnings.showwarning = old
            print(f"\n{arch} {kind} batch {args.batch}: {sum(seen.values()) / args.steps:.1f} "
                  f"syncs per decode step")
            for where, n in seen.most_common():
                print(f"  {n / args.steps:4.1f}/step  {where}")
            while engine.has_unfinished():
                engine.step()
        engine.close()


if __name__ == "__main__":
    main()
