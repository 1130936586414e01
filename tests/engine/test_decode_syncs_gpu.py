"""A decode step never makes the host wait for the GPU (run on the GPU machine:
``pytest -m gpu tests/engine/test_decode_syncs_gpu.py``): with
``torch.cuda.set_sync_debug_mode("error")`` every synchronizing CUDA call raises, and steady-state
decode steps of greedy and of sampled requests (top-k, top-p, repetition penalty, logprobs), dense
and hybrid, in default and deterministic mode, must run through it. One such call a step left the
H200 idle 2 ms a sampled step (docs/benchmarks.md, sixth session; ``tools/gpu/sync_points.py``
names the line of any new one)."""

from __future__ import annotations

import pytest
import torch

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

KINDS = {
    "greedy": dict(temperature=0.0),
    "sampled": dict(temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1,
                    frequency_penalty=0.1, logprobs=True, top_logprobs=2),
}


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_decode_steps_make_no_synchronizing_cuda_call(dense_and_hybrid, deterministic, kind):
    engine = Engine(EngineConfig(model=str(dense_and_hybrid), device="cuda", dtype="bfloat16",
                                 deterministic=deterministic, mem_fraction_static=0.3), progress=False)
    try:
        for i in range(3):
            engine.add_request([5 + i] * (17 + 9 * i), SamplingParams(
                max_new_tokens=32, ignore_eos=True, seed=i, **KINDS[kind]))
        for _ in range(4):  # the prefill and the first decode steps (allocations, first graphs)
            engine.step()
        replays = engine.stats().graph_replays.get("decode", 0)
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(6):
                outs = engine.step()
                assert sum(len(o.new_token_ids) for o in outs) == 3  # every request decoded
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert engine.stats().graph_replays.get("decode", 0) > replays  # the graph path ran
    finally:
        engine.close()
