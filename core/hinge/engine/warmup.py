"""Start-up warm-up requests, so the first real request pays no kernel compilation.

Attention backends compile their own kernels (``AttentionBackend.warmup``) and graph capture runs
every captured shape once, but an eager prefill step, the sampler's paths and the model's other
JIT kernels (deterministic mode's batch-invariant matmul, RMSNorm and log-softmax, fla's chunked
delta rule, the fused decode kernels) compile on the first request whose shapes reach them: in
deterministic mode on an H200 the first request's time to first token was 935 ms against 43 ms
warm (docs/benchmarks.md, run b). sglang sends a warm-up request when its server starts; hinge's
engine does the same before it takes requests (``EngineConfig.warmup``: ``auto`` = on CUDA).

What runs, each request with ``detokenize=False`` and fixed seeds (the engine's seed stream is
not drawn from):

1. two requests in one batch: a greedy one with logprobs, top logprobs and prompt logprobs, and a
   sampled one (temperature, top-p, top-k, min-p, repetition/frequency/presence penalties,
   logprobs), 2 new tokens each: a batched eager or graph prefill, then decode steps;
2. a prompt whose length is a multiple of 16, then a one-token prompt, alone: Triton specializes
   integer arguments on being 1 or a multiple of 16, so the three lengths cover its variants
   (the batched pair's total, 33 tokens, is neither: a kernel over a step's rows sees it too; a
   pair summing to 32 left the hybrid's prefill conv uncompiled for an ordinary step, H200
   2026-12-02);
3. alone, each length the model asks for (``Model.warmup_prompt_lengths``): kernels that take
   another path above some prompt length (the hybrid's fla kernels with short prefills on the
   token recurrence: their chunk pipeline runs on longer ones only).

They run on a scheduler of their own over the engine's pools, with no prefix cache (nothing of
theirs is cached, no cache counter moves); afterwards the engine resets its counters
(``Engine.reset_counters``), and a page or state slot they did not give back is an error (a leak
is a bug, not a warm-up).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from hinge.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

#: new tokens per warm-up request: the prefill samples one, then decode steps
NEW_TOKENS = 2
#: prompt lengths: two ordinary (batched together: 33 rows, itself ordinary), a multiple of 16,
#: one token
BATCHED_LENGTHS = (23, 10)
SOLO_LENGTHS = (32, 1)


def enabled(config: Any) -> bool:
    """``warmup``: ``on``, ``off``, or ``auto`` (on CUDA only: CPU has no JIT kernels to compile)."""
    return config.on_by_device("warmup")


def prompt(length: int, vocab_size: int, salt: int) -> list[int]:
    """``length`` ordinary token ids below ``vocab_size`` (a fixed pattern, no randomness)."""
    return [(salt + 7 * i) % vocab_size for i in range(length)]


def warmup_params(sampled: bool) -> SamplingParams:
    common = dict(max_new_tokens=NEW_TOKENS, ignore_eos=True, detokenize=False, logprobs=True,
                  top_logprobs=1)
    if not sampled:
        return SamplingParams(temperature=0.0, prompt_logprobs_start=0, prompt_top_logprobs=1,
                              **common)
    return SamplingParams(temperature=0.7, top_p=0.9, top_k=50, min_p=0.01, repetition_penalty=1.1,
                          frequency_penalty=0.1, presence_penalty=0.1, seed=0, **common)


def run_warmup(engine: Any) -> float:
    """Run the warm-up requests through ``engine`` (see the module docstring); returns seconds."""
    from hinge.builtin.no_cache import NoCachePolicy
    from hinge.engine.cache_stats import cache_context

    start = time.perf_counter()
    limit = max(1, min(engine.max_model_len, engine.kv.num_usable_tokens) - NEW_TOKENS)
    pages_free = engine.kv.allocator.num_free
    slots_free = engine.states.num_free if engine.states is not None else None
    no_cache = NoCachePolicy()
    no_cache.attach(cache_context(engine.config, engine.kv, None))
    real = engine.scheduler
    engine.scheduler = engine.new_scheduler(no_cache)
    try:
        rounds = [[(n, i == 1) for i, n in enumerate(BATCHED_LENGTHS)]] + \
                 [[(n, False)] for n in (*SOLO_LENGTHS, *engine.model.warmup_prompt_lengths())]
        for r, batch in enumerate(rounds):
            for i, (n, sampled) in enumerate(batch):
                engine.add_request(prompt(min(n, limit), engine.vocab_size, salt=r * 31 + i),
                                   warmup_params(sampled), rid=f"warmup-{r}-{i}")
            while engine.has_unfinished():
                engine.step()
    finally:
        engine.scheduler = real
        engine.reset_counters()
    leaked = pages_free - engine.kv.allocator.num_free
    leaked_slots = slots_free - engine.states.num_free if slots_free is not None else 0
    if leaked or leaked_slots:
        raise RuntimeError(f"the start-up warm-up requests kept {leaked} KV pages and "
                           f"{leaked_slots} state slots (this is a bug); warmup='off' skips them")
    seconds = time.perf_counter() - start
    logger.info("warm-up: %d requests in %.2f s (kernels compiled before the first request)",
                sum(len(b) for b in rounds), seconds)
    return seconds
