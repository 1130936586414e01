"""Scheduler with fake requests: chunked prefill budget, waiting admission, retraction."""

from __future__ import annotations

import torch

from hinge.builtin.no_cache import NoCachePolicy
from hinge.contracts import AttentionLayer
from hinge.engine.kv_pool import KVPool
from hinge.engine.request import Request, RequestStatus
from hinge.engine.scheduler import Scheduler
from hinge.sampling_params import SamplingParams

PAGE = 4


def _scheduler(num_pages: int, *, chunk: int = 64, max_running: int = 64, states=None) -> Scheduler:
    layer = AttentionLayer(0, 1, 1, 2, 1.0)
    per_page = 2 * 2 * 4 * PAGE
    kv = KVPool.create([layer], budget_bytes=per_page * num_pages, page_size=PAGE,
                        dtype=torch.float32, device="cpu")
    return Scheduler(kv, NoCachePolicy(), max_running_requests=max_running,
                     chunked_prefill_size=chunk, states=states)


def _req(i: int, prompt_len: int, new: int) -> Request:
    return Request(f"r{i}", list(range(1, prompt_len + 1)), SamplingParams(max_new_tokens=new))


def _run(sched: Scheduler, reqs: list[Request], max_steps: int = 10_000) -> list:
    """Drive the scheduler as the engine does, with token 7 as every sampled token."""
    for r in reqs:
        sched.add(r)
    batches = []
    for _ in range(max_steps):
        batch = sched.schedule()
        if batch is None:
            break
        batches.append([(r.rid, n) for r, n in zip(batch.reqs, batch.extend_lens, strict=True)])
        for req, n in zip(batch.reqs, batch.extend_lens, strict=True):
            assert len(req.pages) * PAGE >= req.num_computed + n, "pages must cover the step"
            assert n <= req.extend_len
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                req.output_ids.append(7)
                if req.num_output == req.params.max_new_tokens:
                    sched.finish(req)
        pages = [p for r in sched.running for p in r.pages]
        assert len(pages) == len(set(pages)), "a page is owned twice"
        cached = set(getattr(sched.cache, "refs", {}))  # pages a sharing cache holds
        assert sched.allocator.num_used == len(set(pages) | cached)
    assert not sched.has_unfinished()
    return batches


def test_chunked_prefill_never_exceeds_the_token_budget():
    sched = _scheduler(100, chunk=8)
    reqs = [_req(0, 21, 3), _req(1, 5, 3), _req(2, 13, 2)]
    batches = _run(sched, reqs)
    assert all(sum(n for _, n in b) <= 8 for b in batches)
    assert batches[0] == [("r0", 8)] and batches[2] == [("r0", 5), ("r1", 3)]
    assert all(r.is_finished and r.output_ids == [7] * r.params.max_new_tokens for r in reqs)
    assert sched.allocator.num_used == 0


def test_decode_requests_ride_in_mixed_batches_with_prefill_chunks():
    sched = _scheduler(100, chunk=6)
    a, b = _req(0, 4, 5), _req(1, 12, 2)
    sched.add(a)
    sched.add(b)
    first = sched.schedule()
    assert first.phase == "prefill" and first.extend_lens == [4, 2]
    a.num_computed, b.num_computed = 4, 2
    a.output_ids.append(7)
    second = sched.schedule()
    assert second.phase == "mixed" and second.reqs == [a, b] and second.extend_lens == [1, 5]


def test_requests_wait_when_the_pool_is_full_and_all_complete():
    sched = _scheduler(6)  # 5 usable pages = 20 tokens
    reqs = [_req(i, 9, 3) for i in range(4)]
    peak = 0
    for r in reqs:
        sched.add(r)
    while sched.has_unfinished():
        batch = sched.schedule()
        assert batch is not None
        peak = max(peak, len(sched.running))
        assert sched.allocator.num_used <= 5
        for req, n in zip(batch.reqs, batch.extend_lens, strict=True):
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                req.output_ids.append(7)
                if req.num_output == 3:
                    sched.finish(req)
    assert peak < 4, "not every request fits at once, so some must have waited"
    assert all(r.status is RequestStatus.FINISHED and r.num_output == 3 for r in reqs)
    assert sched.allocator.num_used == 0


def test_running_out_of_pages_retracts_the_newest_and_everything_completes():
    sched = _scheduler(9)  # 8 usable pages = 32 tokens; two requests of 4 + 20 need 48
    reqs = [_req(0, 4, 20), _req(1, 4, 20)]
    _run(sched, reqs)
    assert sched.num_retractions >= 1
    assert reqs[1].num_retractions >= 1 and reqs[0].num_retractions == 0
    assert all(r.output_ids == [7] * 20 for r in reqs)
    assert sched.allocator.num_used == 0


def test_retracted_request_recomputes_prompt_and_output():
    sched = _scheduler(9)
    reqs = [_req(0, 4, 20), _req(1, 4, 20)]
    batches = _run(sched, reqs)
    recompute = [n for b in batches for rid, n in b if rid == "r1" and n > 4]
    assert recompute, "after retraction r1 runs prompt + output again in one prefill"


def test_max_running_requests_caps_the_batch():
    sched = _scheduler(100, max_running=2)
    reqs = [_req(i, 3, 4) for i in range(5)]
    batches = _run(sched, reqs)
    assert max(len(b) for b in batches) == 2
    assert all(r.is_finished for r in reqs)


def test_prefills_holding_the_whole_pool_make_progress():
    """Two half-done prefills own every page: the newest is retracted so the oldest continues."""
    sched = _scheduler(5, chunk=16)  # 4 usable pages = 16 tokens
    a, b = _req(0, 12, 1), _req(1, 12, 1)
    for req in (a, b):
        req.pages, req.num_computed = sched.allocator.allocate(2), 8
        req.status = RequestStatus.RUNNING
        sched.running.append(req)
    batch = sched.schedule()
    assert batch.reqs == [a] and batch.extend_lens == [4]
    assert b.num_retractions == 1 and list(sched.waiting) == [b] and b.pages == []


def test_hybrid_requests_hold_a_state_slot_while_running_only():
    from hinge.engine.state_pool import RecurrentLayerSpec, StatePool

    spec = RecurrentLayerSpec(layer_id=0, state_id=0, conv_dim=2, conv_kernel=3)
    states = StatePool.create([spec], max_requests=2, conv_dtype=torch.float32)
    sched = _scheduler(9, max_running=2, states=states)
    reqs = [_req(0, 4, 20), _req(1, 4, 20), _req(2, 3, 2)]
    for r in reqs:
        sched.add(r)
    seen_retraction = False
    while sched.has_unfinished():
        batch = sched.schedule()
        slots = [r.state_slot for r in sched.running]
        assert None not in slots and len(set(slots)) == len(slots) == states.num_used
        assert all(r.state_slot is None for r in sched.waiting)
        seen_retraction |= sched.num_retractions > 0
        for req, n in zip(batch.reqs, batch.extend_lens, strict=True):
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                req.output_ids.append(7)
                if req.num_output == req.params.max_new_tokens:
                    sched.finish(req)
    assert seen_retraction and states.num_used == 0


class _SharingCache(NoCachePolicy):
    """A small page-aligned prefix cache with page ref counts (enough to drive the hit path)."""

    def __init__(self):
        self.entries: list[list] = []  # [tokens, pages, locks]
        self.refs: dict[int, int] = {}
        self.evict_calls = 0

    def match(self, tokens, *, salt=None):
        from hinge.contracts import CacheHit

        best = CacheHit()
        for entry in self.entries:
            n = 0
            while (n + PAGE <= min(len(tokens), len(entry[0]))
                   and tokens[n:n + PAGE] == entry[0][n:n + PAGE]):
                n += PAGE
            if n > best.length:
                best = CacheHit(length=n, pages=tuple(entry[1][:n // PAGE]), handle=entry)
        return best

    def lock(self, hit):
        if hit.handle is not None:
            hit.handle[2] += 1

    def unlock(self, hit):
        if hit.handle is not None:
            hit.handle[2] -= 1

    def insert(self, tokens, pages, checkpoints=None, *, salt=None):
        kept = len(tokens) // PAGE
        self.entries.append([list(tokens[:kept * PAGE]), list(pages[:kept]), 0])
        for p in pages[:kept]:
            self.refs[p] = self.refs.get(p, 0) + 1
        return list(pages[kept:])

    def evict(self, num_pages):
        self.evict_calls += 1
        freed = []
        for entry in [e for e in self.entries if e[2] == 0]:
            if len(freed) >= num_pages:
                break
            self.entries.remove(entry)
            for p in entry[1]:
                self.refs[p] -= 1
                if self.refs[p] == 0:
                    del self.refs[p]
                    freed.append(p)
        return freed


def test_prefix_hits_skip_cached_tokens_and_eviction_makes_room():
    sched = _scheduler(9)  # 8 usable pages = 32 tokens
    cache = sched.cache = _SharingCache()
    first = _req(0, 10, 2)  # 12 tokens: 11 in KV at the end -> 2 full pages cached
    _run(sched, [first])
    assert sched.allocator.num_used == 2 and first.cached_tokens == 0
    again = Request("r1", list(range(1, 11)) + [99], SamplingParams(max_new_tokens=2))
    sched.add(again)
    batch = sched.schedule()
    assert again.cached_tokens == 8 and again.num_computed == 8 and batch.extend_lens == [3]
    assert again.pages[:2] == cache.entries[0][1], "the hit's pages are reused, not copied"
    _run(sched, [])
    big = _req(2, 20, 10)  # needs all 8 pages: the cache must give its pages back
    _run(sched, [big])
    assert cache.evict_calls > 0 and big.output_ids == [7] * 10
