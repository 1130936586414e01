"""A request mid chunked prefill offers the radix cache what it computed so far
(``CachePolicy.insert_unfinished``): a request sent meanwhile hits it (page aligned, never past
the computed tokens) and, in deterministic mode, computes exactly what a cold run computes, for a
dense and a hybrid model, with and without overlap scheduling; a request that computed the same
tokens on its own pages switches to the tree's and its copies go back to the pool; nothing leaks
after everything finishes and the cache is flushed. Off (``insert_unfinished = false``) the
second request misses: the hit comes from the unfinished insert."""

from __future__ import annotations

import pytest
from radix_harness import greedy, prompts

from hinge import LLM
from hinge.testing.checkpoints import tiny_checkpoints

PAGE, GRID, CHUNK = 4, 16, 48


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoints(tmp_path_factory.mktemp, seed=5)


def _engine(path, overlap: bool = False, **kw):
    """The engine of an ``LLM`` (plugin tests use public modules only); ``engine.close()``."""
    kw.setdefault("chunked_prefill_size", CHUNK)
    engine = LLM(str(path), page_size=PAGE, track_interval=GRID, deterministic=True, **kw).engine
    engine.overlap = overlap
    return engine


def _finish(engine, done: dict) -> None:
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                done[out.rid] = out


def _assert_nothing_leaks(engine) -> None:
    assert engine.stats().kv_pages_used == 0, "a page is held but by the prefix cache"
    assert engine.flush_cache() and engine.kv.allocator.num_used == 0, "a page leaked"
    if engine.states is not None:
        assert engine.states.num_used == 0 and engine.states.checkpoints.num_used == 0, "a state slot leaked"
    assert engine.cache.stats()["tree_pages"] == 0


def _cold(path, prompt: list[int], max_new: int):
    engine = _engine(path, cache="none")
    rid = engine.add_request(prompt, greedy(max_new))
    done: dict = {}
    _finish(engine, done)
    engine.close()
    return done[rid]


def _second_mid_prefill(path, overlap: bool, **kw):
    """A (130 tokens, chunks of 48) runs; B (A's first 110 tokens + its own) is sent after A's
    first step. Returns B's output, what A had computed when B was admitted, and the engine."""
    engine = _engine(path, overlap, **kw)
    a_prompt = prompts(1, (130, 131), 256, seed=21)[0]
    b_prompt = a_prompt[:110] + [5, 6, 7]
    a = engine.add_request(a_prompt, greedy(6))
    engine.step()
    req_a = engine.scheduler.find(a)
    b = engine.add_request(b_prompt, greedy(6))
    a_computed = None
    while engine.scheduler.find(b) in engine.scheduler.waiting:
        a_computed = req_a.num_computed  # B is admitted in the next schedule, after A's insert
        assert req_a.extend_len > 1, "A must still be in chunked prefill when B is admitted"
        engine.step()
    done: dict = {}
    _finish(engine, done)
    return done[b], a_computed, engine, b_prompt


@pytest.mark.parametrize("overlap", [False, True], ids=["collect", "overlap"])
@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_a_request_sent_mid_chunked_prefill_hits_the_computed_prefix_and_equals_a_cold_run(
        checkpoint, arch, overlap):
    path = checkpoint(arch)
    out, a_computed, engine, b_prompt = _second_mid_prefill(path, overlap)
    assert out.cached_tokens > 0, "B was admitted after A's computed prefix was offered: it must hit"
    assert out.cached_tokens % PAGE == 0 and out.cached_tokens <= a_computed, (
        f"B hit {out.cached_tokens} tokens, A had computed {a_computed}")
    if engine.states is not None:
        assert out.cached_tokens % GRID == 0, "a hybrid hit resumes from a checkpoint on the grid"
    _assert_nothing_leaks(engine)
    engine.close()
    cold = _cold(path, b_prompt, 6)
    assert out.token_ids == cold.token_ids and out.logprobs == cold.logprobs, "hit != cold run"


def test_without_unfinished_inserts_the_second_request_misses(checkpoint):
    out, _, engine, _ = _second_mid_prefill(checkpoint("qwen3"), False,
                                            cache_options={"insert_unfinished": False})
    assert out.cached_tokens == 0
    _assert_nothing_leaks(engine)
    engine.close()


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_a_request_that_computed_cached_tokens_itself_switches_to_the_trees_pages(checkpoint, arch):
    """A (48 tokens, one output token) and B (A + 60 tokens), chunks of 40: B is admitted on
    A's first chunk (hit 40, or 32 for the hybrid: its checkpoint); both compute tokens 40..48 in
    the same step; A leaves first and caches them; B's next insert finds them in the tree: B's
    page table switches to A's pages and B's copies go back to the pool. B's output equals a cold
    run's (the two copies hold the same KV)."""
    path = checkpoint(arch)
    engine = _engine(path, chunked_prefill_size=40)
    a_prompt = prompts(1, (48, 49), 256, seed=22)[0]
    b_prompt = a_prompt + prompts(1, (60, 61), 256, seed=23)[0]
    a = engine.add_request(a_prompt, greedy(1))
    b = engine.add_request(b_prompt, greedy(5))
    sched = engine.scheduler
    req_b = sched.find(b)
    done: dict = {}
    for out in engine.step() + engine.step():  # A 0..40; then A 40..48 and B (a hit) onwards
        done[out.rid] = out
    assert a in done and req_b.num_computed > 48, "A finished, B computed 40..48 itself"
    assert req_b.cached_tokens == (32 if engine.states is not None else 40)
    own = list(req_b.pages[10:12])  # B's pages of tokens 40..48
    tree_pages = engine.cache.tree.walk(a_prompt, None).pages()[10:12]  # A's, cached when it left
    assert len(tree_pages) == 2 and not set(own) & set(tree_pages)
    engine.step()  # B's insert, then its next chunk
    assert req_b.pages[10:12] == tree_pages, "B must read the tree's copy of tokens 40..48"
    held = {p for r in sched.running for p in r.pages} | {
        p for n in engine.cache.tree.nodes() for p in n.pages}
    assert sched.allocator.num_used == len(held), "B's copies must go back to the pool"
    _finish(engine, done)
    _assert_nothing_leaks(engine)
    engine.close()
    cold = _cold(path, b_prompt, 5)
    assert done[b].token_ids == cold.token_ids and done[b].logprobs == cold.logprobs


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_a_retracted_request_whose_prefix_was_cached_mid_prefill_frees_everything(checkpoint, arch):
    """A 64-token pool: r1 (44 tokens, chunks of 16) arrives while r0 decodes; r0's decode
    outgrows the pool while r1 is in chunked prefill with its prefix in the tree (locked by it),
    so r1 is retracted then: the retraction unlocks and inserts it, r1 recomputes, and in the end
    no page or state slot is held but by the cache, a flush returns them all, and both outputs
    equal cold runs."""
    path = checkpoint(arch)
    kw = dict(max_running_requests=4, checkpoint_slots=8)
    engine = _engine(path, chunked_prefill_size=16, kv_cache_bytes=_bytes_for_tokens(path, 64, **kw), **kw)
    sched = engine.scheduler
    assert engine.kv.num_usable_tokens == 64
    seen = []
    retract = sched._retract

    def spy(req):
        seen.append((req.rid, req.is_decoding, req.cache_hit.length))
        retract(req)

    sched._retract = spy
    long_decode = prompts(1, (6, 7), 256, seed=31)[0]
    chunked = prompts(1, (44, 45), 256, seed=32)[0]
    r0 = engine.add_request(long_decode, greedy(50))
    done: dict = {}
    while sched.find(r0).num_output < 30:
        engine.step()
    r1 = engine.add_request(chunked, greedy(4))
    _finish(engine, done)
    assert any(rid == r1 and not decoding and hit > 0 for rid, decoding, hit in seen), (
        f"the test must retract r1 mid prefill after its prefix was cached: {seen}")
    _assert_nothing_leaks(engine)
    engine.close()
    for rid, prompt, n in ((r0, long_decode, 50), (r1, chunked, 4)):
        cold = _cold(path, prompt, n)
        assert done[rid].token_ids == cold.token_ids and done[rid].logprobs == cold.logprobs


def _bytes_for_tokens(path, tokens: int, **kw) -> int:
    """``kv_cache_bytes`` for a pool of ``tokens`` KV tokens (the state pool, if any, is paid
    first: two probes give the fixed part and the bytes per token)."""
    def usable(budget: int) -> int:
        engine = LLM(str(path), page_size=PAGE, track_interval=GRID, kv_cache_bytes=budget, **kw).engine
        n = engine.kv.num_usable_tokens
        engine.close()
        return n

    one, two = usable(1 << 20), usable(2 << 20)
    per_token = (1 << 20) / (two - one)
    return int((1 << 20) - one * per_token + tokens * per_token) + 1
