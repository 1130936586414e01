"""Hybrid models keep one running checkpoint per request (the last grid point passed), so a
request that shares only part of a cached path finds KV without a state there: its prefill keeps
a checkpoint at the branch point (on the grid), and the next request hits it."""

from __future__ import annotations

from radix_harness import greedy, prompts

from hinge import LLM
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer


def test_a_branch_point_is_checkpointed_by_the_next_prefill_and_hit_by_the_one_after(tmp_path):
    path = make_tiny_checkpoint("qwen3_5", tmp_path, seed=6)
    write_byte_tokenizer(path)
    shared = prompts(1, (45, 46), 256, seed=8)[0]
    with LLM(str(path), page_size=4, track_interval=16, deterministic=True) as llm:
        first = llm.generate([shared + [3, 4, 5]], greedy(30))[0]
        assert first.cached_tokens == 0
        tree = llm.engine.cache.stats()
        assert tree["tree_checkpoints"] == 1, "one checkpoint per finished request: its last"
        second = llm.generate([shared + [6, 7]], greedy(4))[0]
        assert second.cached_tokens == 0, "KV matched, but no state at or before the branch"
        third = llm.generate([shared + [8]], greedy(4))[0]
        assert third.cached_tokens == 32, "the branch point floor(45 / 16) * 16 was kept by the second"
        cold_llm_tokens = third.token_ids
    with LLM(str(path), page_size=4, track_interval=16, deterministic=True, cache="none") as cold:
        want = cold.generate([shared + [8]], greedy(4))[0]
    assert cold_llm_tokens == want.token_ids and third.logprobs == want.logprobs
