"""A deterministic engine serves the same bits with the radix cache as without it, through
everything that moves pages and states around: shared prefixes, follow-up turns, a pool so small
that decodes evict and retract, overlap scheduling. Afterwards no page and no state slot is held
but by the cache, and a flush returns them all."""

from __future__ import annotations

import pytest
from radix_harness import greedy, prompts

from hinge import LLM
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer


@pytest.mark.parametrize("overlap", [False, True], ids=["collect", "overlap"])
@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_radix_serves_the_bits_of_no_cache_under_eviction_and_retraction(tmp_path, arch, overlap):
    path = make_tiny_checkpoint(arch, tmp_path, seed=7)
    write_byte_tokenizer(path)
    shared = prompts(3, (30, 50), 256, seed=11)
    batch1 = [s + p for s in shared for p in prompts(3, (2, 12), 256, seed=len(s))]
    # NOTE: pools sized so batch 1's decodes outgrow them (eviction, then retraction) while the
    # follow-ups of its last requests still find their paths (the least recently used go first);
    # requests sharing a prefix hit each other mid chunked prefill, which saves pages
    kw = dict(page_size=4, track_interval=8, deterministic=True, max_running_requests=6,
              kv_cache_bytes=80_000 if arch == "qwen3" else 420_000, chunked_prefill_size=32)
    if arch == "qwen3_5":
        kw["checkpoint_slots"] = 24
    results = {}
    for cache in ("none", "radix"):
        with LLM(str(path), cache=cache, **kw) as llm:
            llm.engine.overlap = overlap
            first = llm.generate(batch1, [greedy(n) for n in range(20, 20 + len(batch1))])
            batch2 = [p + o.token_ids + [5] for p, o in zip(batch1, first, strict=True)][-3:]
            second = llm.generate(batch2, greedy(10))
            engine = llm.engine
            results[cache] = [(o.token_ids, o.logprobs) for o in first + second]
            if cache == "radix":
                stats = engine.stats()
                hits = sum(o.cached_tokens for o in first + second)
                retractions = engine.scheduler.num_retractions
                assert stats.kv_pages_used == 0 and stats.num_running == 0
                if engine.states is not None:
                    assert engine.states.num_used == 0
                    assert engine.states.checkpoints.num_used == stats.prefix_cache["tree_checkpoints"]
                assert engine.flush_cache() and engine.kv.allocator.num_used == 0
                if engine.states is not None:
                    assert engine.states.checkpoints.num_used == 0
    assert hits > 0 and retractions > 0, f"the test must hit ({hits}) and retract ({retractions})"
    assert results["radix"] == results["none"]
