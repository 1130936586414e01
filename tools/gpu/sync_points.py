"""Where a decode step waits for the GPU: every synchronizing CUDA call of a few steady-state
decode steps, by the stack that made it (``torch.cuda.set_sync_debug_mode``), for greedy and
sampled requests on a tiny checkpoint (sync points do not depend on the model's size).

    python3 tools/gpu/sync_points.py [--arch qwen3] [--batch 4] [--steps 4]

A decode step should not sync at all (its tokens come back by an event the next step waits on);
each line is device idle time the host spends waiting (docs/benchmarks.md, sixth session: the
sampled step's one sync). The prefill step is reported too (fla's and the hybrid's host work).
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


def syncs_of(engine: Engine, steps: int) -> collections.Counter[str]:
    """Run ``steps`` engine steps; the synchronizing CUDA calls they made, by message and the
    last hinge frames of the stack that made them."""
    seen: collections.Counter[str] = collections.Counter()

    def hook(message, category, filename, lineno, file=None, line=None):
        if "prototype" in str(message):  # set_sync_debug_mode's own notice
            return
        frames = [f for f in traceback.extract_stack()[:-1] if "/hinge/" in f.filename]
        where = " <- ".join(f"{f.filename.split('/hinge/')[-1]}:{f.lineno} {f.name}"
                            for f in reversed(frames[-4:]))
        seen[f"{str(message)[:60]} @ {where}"] += 1

    old = warnings.showwarning
    warnings.showwarning = hook
    warnings.simplefilter("always")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        for _ in range(steps):
            engine.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = old
    return seen


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
            prefill = syncs_of(engine, 1)  # the step that prefills every request
            for _ in range(3):  # the first decode steps
                engine.step()
            decode = syncs_of(engine, args.steps)
            for phase, seen, steps in (("prefill", prefill, 1), ("decode", decode, args.steps)):
                print(f"\n{arch} {kind} batch {args.batch} {phase}: "
                      f"{sum(seen.values()) / steps:.1f} syncs per step")
                for where, n in seen.most_common():
                    print(f"  {n / steps:4.1f}/step  {where}")
            while engine.has_unfinished():
                engine.step()
        engine.close()


if __name__ == "__main__":
    main()
