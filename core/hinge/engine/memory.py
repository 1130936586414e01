"""How much memory a step needs beyond the weights, measured before the KV pool is sized.

On CUDA the engine runs one profiling forward at the largest step it will run (a prefill of
``chunked_prefill_size`` tokens, sampling its last row) over a throwaway pool just big enough
for it, and reads torch's peak allocation: activations, workspaces and the logits. The sampler's
worst step is measured beside it (``sampler_rows`` rows of the whole vocabulary through the full
sort of top-p sampling, the log-softmax and the top logprobs: ~40 bytes per logit, 0.4 GB at 64
rows of Qwen3's 151,936): the larger of the two peaks is what the step needs. The KV budget is
then ``mem_fraction_static`` of the free memory minus weights minus this peak
(``hinge.engine.kv_pool.kv_budget_bytes``), so the first long prompt or the first full batch of
sampled requests cannot run out of memory after the pool took everything.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from hinge.batching import ForwardBatchBuilder, StepSeq
from hinge.forward import ForwardContext, KVCache

logger = logging.getLogger(__name__)


def profile_step_bytes(model: Any, attn: Any, *, num_tokens: int, page_size: int,
                       dtype: torch.dtype, device: str, state_pool_factory: Any = None,
                       sampler_rows: int = 0) -> int:
    """Peak bytes one prefill step of ``num_tokens`` allocates beyond what is allocated before
    it (the throwaway pools excluded), or the sampler's worst step of ``sampler_rows`` rows if
    that is larger. 0 off CUDA (the CPU budget is a fixed byte count)."""
    if torch.device(device).type != "cuda" or num_tokens <= 0:
        return 0
    sampler = sampler_peak_bytes(sampler_rows, model.config.vocab_size, device) if sampler_rows else 0
    pages = -(-num_tokens // page_size) + 1
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    kv = KVCache(
        k=[torch.zeros(pages * page_size, a.num_kv_heads, a.head_dim, dtype=dtype, device=device)
           for a in model.attention_layers],
        v=[torch.zeros(pages * page_size, a.num_kv_heads, a.head_dim, dtype=dtype, device=device)
           for a in model.attention_layers],
        page_size=page_size)
    states = state_pool_factory(2) if state_pool_factory is not None else None
    builder = ForwardBatchBuilder(page_size=page_size, max_rows=2, max_pages=pages, device=device)
    pools = torch.cuda.memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    batch = builder.build([StepSeq(
        row=1, prefix_len=0, extend_len=num_tokens, pages=list(range(1, pages)),
        new_tokens=[0] * num_tokens, state_slot=1 if states is not None else None, sample=True)])
    batch.attn_metadata = attn.prepare_metadata(batch)
    with torch.inference_mode():
        logits = model.forward(ForwardContext(batch=batch, attn=attn, kv=kv, states=states)).logits
        torch.log_softmax(logits.float(), dim=-1)  # the sampler's largest temporary (at most)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base - pools
    del kv, states, builder, batch, logits
    torch.cuda.empty_cache()
    logger.info("memory: a %d-token step needs %.2f GiB beyond the weights (profiling forward), "
                "the sampler %.2f GiB at %d rows", num_tokens, peak / 2**30, sampler / 2**30,
                sampler_rows)
    return max(int(peak), sampler, 0)


def sampler_peak_bytes(rows: int, vocab_size: int, device: str) -> int:
    """Peak bytes of the sampler's worst step over ``rows`` rows of random float32 logits: every
    row sampled through the full-vocabulary sort (top-p without top-k), with logprobs and 20 top
    logprobs. Measured with torch's allocator statistics; the logits themselves included."""
    from hinge.engine.sampler import sample_rows

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        logits = torch.randn(rows, vocab_size, device=device)
        col = torch.ones(rows, dtype=torch.float32, device=device)
        tokens = sample_rows(logits, None, col[:, None], torch.full((rows,), vocab_size, device=device),
                             col * 0.9, col * 0.0, torch.arange(rows, device=device),
                             torch.zeros(rows, dtype=torch.int64, device=device))
        logprobs = torch.log_softmax(logits, dim=-1)  # deterministic mode's; default mode's
        # logsumexp allocates less, so this bounds both
        logprobs.gather(1, tokens[:, None])
        logprobs.topk(20, dim=-1)
        del logits, logprobs, tokens
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    torch.cuda.empty_cache()
    return max(int(peak), 0)
