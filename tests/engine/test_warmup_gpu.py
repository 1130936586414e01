"""On CUDA the start-up warm-up leaves nothing for the first requests to compile (run on the GPU
machine: ``pytest -m gpu tests/engine/test_warmup_gpu.py``): after the engine starts, Triton's
post-compile hook sees no new kernel specialization while requests of other lengths, batched and
alone, greedy and sampled, run and hit the prefix cache, in default and deterministic mode."""

from __future__ import annotations

import pytest
import torch

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.sampling_params import SamplingParams
from hinge.testing.engine_runs import run_requests

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SAMPLED = SamplingParams(max_new_tokens=8, temperature=0.7, top_p=0.9, top_k=50,
                         repetition_penalty=1.1, logprobs=True, ignore_eos=True, seed=1)
GREEDY = SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True, logprobs=True)


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
def test_requests_after_start_up_compile_no_triton_kernel(dense_and_hybrid, deterministic):
    import triton

    engine = Engine(EngineConfig(model=str(dense_and_hybrid), device="cuda", dtype="bfloat16",
                                 deterministic=deterministic, warmup="on"), progress=False)
    compiled: list[str] = []
    hook = triton.knobs.runtime.jit_post_compile_hook

    def record(*args, fn=None, repr=None, compile=None, **kwargs):
        # the kernel's name and its specialization (argument types and which ints/pointers were
        # specialized): what a failure needs to say, where the repr alone did not (H200 2026-12-02)
        spec = (compile or {}).get("specialization_data", "")
        compiled.append(f"{getattr(fn, 'name', repr)}: {str(spec)[:600]}")

    triton.knobs.runtime.jit_post_compile_hook = record
    try:
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 250, (n,), generator=g).tolist() for n in (57, 300, 48, 1, 130)]
        first = run_requests(engine, prompts[:2], [GREEDY, SAMPLED])
        run_requests(engine, prompts[2:4], [SAMPLED, GREEDY])
        run_requests(engine, prompts[4:], [GREEDY])
        # a second turn: the first turn's prompt and output plus a suffix hits the prefix cache
        turn2 = prompts[1] + first[1].token_ids + prompts[4][:40]
        run_requests(engine, [turn2], [GREEDY])
        cached = engine.stats().cached_tokens
    finally:
        triton.knobs.runtime.jit_post_compile_hook = hook
        engine.close()
    assert cached > 0  # the hit path ran
    assert compiled == [], (f"{len(compiled)} kernel specializations compiled after start-up:\n"
                            + "\n".join(compiled[:5]))
