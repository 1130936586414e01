"""hinge's decode step with CUDA graphs off and on, in one run, and what the graph runner captured.

The model is the Qwen3-8B shape of ``decode_step.py`` (random bf16 weights, ``load_format=dummy``,
8192-token vocabulary). For each batch size B: B requests of ``--prompt-len`` random tokens are
prefilled, then ``--steps`` decode steps are timed (wall per ``Engine.step()``, synchronised at
the end) with ``graphs=off`` and with the plan's graphs; the replay and eager counters of the
graph engine show which path ran.

    python tools/gpu/graphs.py --batch 1 16 64 --attention triton

Prints the plan's graph lines, the capture log line, then one table row per batch size.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from decode_step import write_config  # noqa: E402


def decode_ms(engine, batch: int, prompt_len: int, steps: int) -> float:
    from hinge.sampling_params import SamplingParams

    g = torch.Generator().manual_seed(batch)
    params = SamplingParams(max_new_tokens=steps + 8, temperature=0, ignore_eos=True)
    for _ in range(batch):
        engine.add_request(torch.randint(10, 8000, (prompt_len,), generator=g).tolist(), params)
    while any(r.num_output < 2 for r in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) * 1e3 / steps
    while engine.has_unfinished():
        engine.step()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--attention", default="triton")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from hinge.config import EngineConfig
    from hinge.engine.engine import Engine

    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), 8192, args.layers)
        common = dict(model=str(path), device="cuda", load_format="dummy", attention=args.attention,
                      max_running_requests=max(args.batch), max_model_len=4096)
        rows = []
        for graphs in ("off", "auto"):
            engine = Engine(EngineConfig(**common, graphs=graphs), progress=False)
            if graphs == "auto":
                print("\n".join(d.describe() for d in engine.plan.graphs.values()))
            for b in args.batch:
                rows.append((graphs, b, decode_ms(engine, b, args.prompt_len, args.steps)))
            stats = engine.stats()
            rows.append((graphs, "counters", stats.graph_replays, stats.eager_steps))
            engine.close()
    eager = {b: ms for g, b, *rest in rows if g == "off" and b != "counters" for ms in rest}
    print(f"{'batch':>6} {'eager ms/step':>14} {'graphs ms/step':>15} {'speedup':>8}")
    for g, b, *rest in rows:
        if g == "auto" and b != "counters":
            print(f"{b:>6} {eager[b]:>14.2f} {rest[0]:>15.2f} {eager[b] / rest[0]:>7.2f}x")
    for g, b, *rest in rows:
        if b == "counters":
            print(f"graphs={g}: replays {rest[0]}, eager steps {rest[1]}")


if __name__ == "__main__":
    main()
