"""Continuous batching with chunked prefill, admission that waits, and retraction.

One ``schedule()`` per step builds a batch in three passes (all in arrival order):

1. ``# decode``: every running request that is decoding gets one token. When the pool has no page
   for it, the prefix cache is asked to evict, then the newest running request is retracted
   (its pages freed, requeued at the front of ``waiting`` to recompute prompt + output).
2. ``# chunked prefill``: running requests with prompt tokens left continue, within the token
   budget (``chunked_prefill_size`` new tokens per step, decode tokens included).
3. ``# admission``: waiting requests join while the budget, ``max_running_requests`` and free
   pages allow; a request that does not fit waits (nothing is admitted in a step that retracted).

Before the passes, each running request still in chunked prefill offers the prefix cache its
computed whole pages (``_cache_unfinished``), so one admitted in this step hits them.

Hybrid models: every scheduled request gets a ``StatePlan`` (its state slots and the checkpoint
the prefix cache wants kept this step; ``hinge.engine.state_plans``). A request that leaves
(finished, aborted, retracted) offers the cache what the client received: prompt + returned
output, never past the tokens whose KV was computed, with its confirmed checkpoints up to there.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

from hinge.engine.request import RequestStatus, ScheduledBatch
from hinge.engine.state_plans import StatePlanner
from hinge.engine.state_pool import StateMoves

if TYPE_CHECKING:
    from hinge.contracts import CachePolicy
    from hinge.engine.kv_pool import KVPool, PageAllocator
    from hinge.engine.request import Request
    from hinge.engine.state_pool import StatePool

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, kv: KVPool, cache: CachePolicy, *, max_running_requests: int,
                 chunked_prefill_size: int, states: StatePool | None = None):
        assert kv.allocator is not None, "the KV cache needs a page allocator"
        self.states = states  #: hybrid models: one recurrent-state slot per running request
        self.kv = kv
        self.allocator: PageAllocator = kv.allocator
        self.cache = cache
        self.max_running_requests = max_running_requests
        self.token_budget = chunked_prefill_size if chunked_prefill_size > 0 else 1 << 62
        #: rows of the runner's device tables (page table, last token, penalties), one per
        #: running request; row 0 is reserved for padded graph rows
        self.free_rows = list(range(max_running_requests, 0, -1))
        self.waiting: deque[Request] = deque()
        #: state-slot work planned while scheduling; handed to the runner with the batch
        self.moves = StateMoves()
        self.running: list[Request] = []
        self.num_retractions = 0
        #: hybrid models: state slots and checkpoints of running requests
        self.planner = StatePlanner(states, cache) if states is not None else None
        #: offer running requests' computed prefixes after each prefill chunk (``_cache_unfinished``)
        self.cache_unfinished = bool(getattr(cache, "caches_unfinished", False))
        #: prefix-cache counters (first admissions): tokens looked up and tokens served from it
        self.cache_query_tokens = 0
        self.cache_hit_tokens = 0

    # queue management -----------------------------------------------------------------------
    def add(self, req: Request) -> None:
        req.status = RequestStatus.WAITING
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def find(self, rid: str) -> Request | None:
        for req in (*self.running, *self.waiting):
            if req.rid == rid:
                return req
        return None

    def finish(self, req: Request) -> None:
        """Remove a finished or aborted request and hand its KV to the cache policy."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._release(req)
        req.status = RequestStatus.FINISHED

    # one step -------------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch | None:
        """The next batch, or None when nothing can run (nothing unfinished, or a bug)."""
        if self.cache_unfinished:
            self._cache_unfinished()
        for _ in range(len(self.running) + len(self.waiting) + 1):
            batch, retracted = self._try_schedule()
            if batch is not None:
                return batch
            if not retracted:
                if len(self.running) <= 1 or not any(r.can_decode or not r.is_decoding
                                                     for r in self.running):
                    return None  # nothing can run, or only results still in flight
                # running prefills hold the pool and none can take a token: make room
                self._retract(self.running[-1])
        return None

    def _try_schedule(self) -> tuple[ScheduledBatch | None, bool]:
        reqs: list[Request] = []
        lens: list[int] = []
        budget = self.token_budget
        retracted = False
        # decode
        for req in list(self.running):
            if req not in self.running or not req.can_decode:
                continue
            while not self._reserve(req, req.num_tokens):
                victim = self.running[-1]
                self._retract(victim)
                retracted = True
                if victim is req:
                    break
            else:
                reqs.append(req)
                lens.append(1)
                budget -= 1
        # chunked prefill
        for req in self.running:
            if req.is_decoding or req in reqs or budget <= 0:
                continue
            n = self._fit(req, min(req.extend_len, budget))
            if n > 0:
                reqs.append(req)
                lens.append(n)
                budget -= n
        # admission
        while (self.waiting and budget > 0 and not retracted
               and len(self.running) < self.max_running_requests):
            req = self.waiting[0]
            n = self._admit(req, budget)
            if n == 0:
                break
            reqs.append(req)
            lens.append(n)
            budget -= n
        if not reqs:
            return None, retracted
        decoding = [r.is_decoding for r in reqs]
        phase = "decode" if all(decoding) else "prefill" if not any(decoding) else "mixed"
        moves, self.moves = self.moves, StateMoves()
        plans = None if self.planner is None else [
            self.planner.plan(r, r.num_computed, n) for r, n in zip(reqs, lens, strict=True)]
        return ScheduledBatch(phase=phase, reqs=reqs, extend_lens=lens, state_moves=moves,
                              state_plans=plans), retracted

    # pages ----------------------------------------------------------------------------------
    def _pages_short(self, req: Request, num_tokens: int) -> int:
        return self.kv.pages_needed(num_tokens) - len(req.pages)

    def _make_room(self, num_pages: int) -> bool:
        short = num_pages - self.allocator.num_free
        if short > 0:
            freed = self.cache.evict(short)
            if freed:
                self.allocator.free(freed)
        return self.allocator.can_allocate(num_pages)

    def _reserve(self, req: Request, num_tokens: int) -> bool:
        """Give ``req`` pages for its first ``num_tokens`` tokens; False when the pool is short."""
        short = self._pages_short(req, num_tokens)
        if short <= 0:
            return True
        if not self._make_room(short):
            return False
        req.pages.extend(self.allocator.allocate(short))
        return True

    def _fit(self, req: Request, n: int) -> int:
        """Largest ``m <= n`` new tokens of ``req`` the pool can hold now (pages reserved)."""
        if self._reserve(req, req.num_computed + n):
            return n
        self._make_room(1)
        room = (len(req.pages) + self.allocator.num_free) * self.kv.page_size - req.num_computed
        m = max(0, min(n, room))
        if m > 0:
            assert self._reserve(req, req.num_computed + m)
        return m

    def _admit(self, req: Request, budget: int) -> int:
        """Move the head of ``waiting`` to ``running`` with its first chunk; 0 if it must wait."""
        if req.num_pending:
            return 0  # retracted while its last token was in flight: wait for its id
        if self.planner is not None and not self.planner.can_admit():
            return 0  # hybrid: no free recurrent-state slot, wait for a request to finish
        hit = self.cache.match(self._matchable(req), salt=req.cache_salt)
        if self.planner is not None:
            hit = self.planner.usable_hit(hit)
        n = min(req.num_tokens - hit.length, budget)
        # NOTE: keep a page of headroom per decoding request so admission does not force retraction
        headroom = sum(1 for r in self.running if r.is_decoding)
        need = self.kv.pages_needed(hit.length + n) - len(hit.pages) + headroom
        self.cache.lock(hit)  # NOTE: before making room, so eviction cannot take the hit's pages
        if not self._make_room(need):
            self.cache.unlock(hit)
            return 0
        self.waiting.popleft()
        req.row = self.free_rows.pop()
        req.cache_hit = hit
        req.pages = list(hit.pages)
        req.num_computed = hit.length
        if self.planner is not None:
            self.planner.admit(req, hit, self.moves)
        if req.num_retractions == 0:
            req.cached_tokens = hit.length
            self.cache_query_tokens += req.num_prompt
            self.cache_hit_tokens += hit.length
        assert self._reserve(req, hit.length + n)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        return n

    def _matchable(self, req: Request) -> list[int]:
        """Tokens a prefix hit may cover: never the last one (its logits are needed), never past
        the first position whose prompt logprob is still to be computed."""
        ids = req.all_ids[:-1]
        start = req.prompt_logprobs_from
        if start is not None:
            ids = ids[:max(start - 1 + len(req.prompt_logprobs), 0)]
        return ids

    def _cache_unfinished(self) -> None:
        """Offer each running request in chunked prefill (prompt tokens left) what its launched
        steps computed, in whole pages, with the confirmed checkpoints it no longer reads
        (``CachePolicy.insert_unfinished``; sglang's ``cache_unfinished_req``).

        - Computed means ``num_computed``, which ``Engine._launch`` advances when it launches a
          step: with overlap the last step may still run, but the pages it writes are read only by
          later steps on the same stream (as a request released with a step in flight is cached
          today). Never past what the client received (invariant 2; a retracted request
          recomputes prompt + returned output). Checkpoints count only once confirmed.
        - The request's lock moves to the new hit (its pages in the tree stay locked until it
          leaves; ``_release`` then inserts everything and unlocks that hit).
        - Pages the tree already held (another request cached the same tokens first): the request
          switches to the tree's pages and its copies are freed at once, as sglang does. The page
          list becomes a new list, so the runner rewrites the request's page-table row whole
          (``ForwardBatchBuilder``); a copy written by a step still in flight is reallocated only
          to later steps on the same stream. Both copies hold the same KV (a hit equals a cold
          run, invariant 3), so the request computes what it would have computed.
        - Hybrid models: the request keeps writing only its own slot; a slot its next step reads
          (``state_source``) stays its own until it has been read (offered in a later step).
        """
        ps = self.kv.page_size
        for req in self.running:
            if req.is_decoding or req.cache_hit is None:
                continue
            aligned = min(req.num_computed, req.num_prompt + req.num_output) // ps * ps
            if aligned <= req.cache_hit.length:
                continue
            checkpoints = self.planner.offer_running(req, aligned) if self.planner is not None else {}
            hit = self.cache.insert_unfinished(req.token_slice(0, aligned), req.pages[:aligned // ps],
                                               req.cache_hit, checkpoints, salt=req.cache_salt)
            req.cache_hit = hit
            shared = len(hit.pages)
            copies = [p for p, q in zip(req.pages[:shared], hit.pages, strict=True) if p != q]
            if copies:
                req.pages = [*hit.pages, *req.pages[shared:]]
                self.allocator.free(copies)

    def _retract(self, req: Request) -> None:
        logger.info("retracting request %s (%d tokens) to free %d KV pages",
                    req.rid, req.num_tokens, len(req.pages))
        self.running.remove(req)
        self._release(req)
        req.num_computed = 0
        req.num_retractions += 1
        req.status = RequestStatus.WAITING
        self.waiting.appendleft(req)
        self.num_retractions += 1

    def _release(self, req: Request) -> None:
        # invariant 2: cache what the client received, never KV that was not computed
        cached = min(req.num_computed, req.num_prompt + req.num_output)
        checkpoints = self.planner.release(req, cached) if self.planner is not None else {}
        if req.pages:
            to_free = self.cache.insert(req.all_ids[:cached], list(req.pages), checkpoints,
                                        salt=req.cache_salt)
            if to_free:
                self.allocator.free(to_free)
        else:
            for slot in checkpoints.values():
                self.states.checkpoints.free(slot)
        if req.cache_hit is not None:
            self.cache.unlock(req.cache_hit)
            req.cache_hit = None
        req.pages = []
        if req.row is not None:
            self.free_rows.append(req.row)
            req.row = None

    def confirm_checkpoints(self, sched: ScheduledBatch, written: list[bool]) -> dict[str, int]:
        """A launched step's receipt (``CheckpointReceipt.written``): its checkpoints that every
        recurrent layer wrote become the requests' own; returns how many, by phase."""
        if self.planner is None:
            return {}
        return self.planner.confirm(sched.checkpoints, written)
