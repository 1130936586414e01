"""The cache contract passes a toy prefix cache (dense and with recurrent-state checkpoints) and
fails caches that leak pages or checkpoint slots, evict what is locked, share across salts, or
hand out a state at the wrong position."""

from __future__ import annotations

import pytest

from hinge.builtin.no_cache import NoCachePolicy
from hinge.contracts import CacheHit, CachePolicy, CheckpointPlan
from hinge.plugins import CacheCapabilities, CachePolicySpec
from hinge.testing import CachePolicyContract
from hinge.testing.cache_contract import SlotLedger, attach


class ToyPrefixCache(CachePolicy):
    """Full pages keyed by (salt, the whole token prefix up to them); states keyed the same way
    by the prefix they follow; LRU-free, refcounted locks."""

    capabilities = CacheCapabilities(prefix_sharing=True, recurrent_state=True)

    def __init__(self, options=None, build=None, page_size=16, honour_locks=True):
        self.page_size = build.page_size if build is not None else page_size
        self.pages: dict[tuple, int] = {}  # (salt, prefix through page end) -> page id
        self.states: dict[tuple, int] = {}  # (salt, prefix) -> checkpoint slot
        self.locks: dict[int, int] = {}
        self.state_locks: dict[int, int] = {}
        self.honour_locks = honour_locks

    def _slots(self):
        return self.context.checkpoint_slots

    def match(self, tokens, *, salt=None):
        pages, n, best = [], 0, (0, None)
        while (n + 1) * self.page_size <= len(tokens):
            page = self.pages.get((salt, tuple(tokens[: (n + 1) * self.page_size])))
            if page is None:
                break
            pages.append(page)
            n += 1
            state = self.states.get((salt, tuple(tokens[: n * self.page_size])))
            if state is not None:
                best = (n, state)
        if not (self.context and self.context.recurrent):
            return CacheHit(length=n * self.page_size, pages=tuple(pages))
        grid = self.context.track_interval
        branch = n * self.page_size // grid * grid
        k, state = best
        return CacheHit(length=k * self.page_size, pages=tuple(pages[:k]), state_slot=state,
                        branch=branch if branch > k * self.page_size else None)

    def lock(self, hit):
        for p in hit.pages:
            self.locks[p] = self.locks.get(p, 0) + 1
        if hit.state_slot is not None:
            self.state_locks[hit.state_slot] = self.state_locks.get(hit.state_slot, 0) + 1

    def unlock(self, hit):
        for p in hit.pages:
            self.locks[p] -= 1
        if hit.state_slot is not None:
            self.state_locks[hit.state_slot] -= 1

    def insert(self, tokens, pages, checkpoints=None, *, salt=None):
        back = []
        for i, page in enumerate(pages):
            key = (salt, tuple(tokens[: (i + 1) * self.page_size]))
            if len(key[1]) < (i + 1) * self.page_size or key in self.pages:
                back.append(page)
            else:
                self.pages[key] = page
        for position, slot in (checkpoints or {}).items():
            key = (salt, tuple(tokens[:position]))
            aligned = position % self.page_size == 0 and 0 < position <= len(tokens)
            if aligned and key not in self.states and (salt, key[1]) in self.pages:
                self.states[key] = slot
            else:
                self._slots().free(slot)
        return back

    def _free(self, limit):
        # NOTE: free longest prefixes first so no kept page loses its parent
        freed = []
        for key in sorted(self.pages, key=lambda k: len(k[1]), reverse=True):
            if len(freed) >= limit:
                break
            page = self.pages[key]
            if self.locks.get(page, 0) and self.honour_locks:
                continue
            if any(k[0] == key[0] and len(k[1]) > len(key[1]) and k[1][: len(key[1])] == key[1]
                   for k in self.pages):
                continue
            freed.append(self.pages.pop(key))
            state = self.states.pop(key, None)
            if state is not None:
                self._slots().free(state)
        return freed

    def evict(self, num_pages):
        return self._free(num_pages)

    def evict_checkpoints(self, num_slots):
        done = 0
        for key, slot in list(self.states.items()):
            if done < num_slots and not (self.state_locks.get(slot, 0) and self.honour_locks):
                self._slots().free(self.states.pop(key))
                done += 1
        return done

    def flush(self):
        freed = self._free(len(self.pages))
        self.evict_checkpoints(len(self.states))
        return freed

    def num_evictable_pages(self):
        return sum(1 for p in self.pages.values() if not self.locks.get(p, 0))

    def plan_checkpoint(self, start, end, branch=None):
        if branch is not None and start < branch <= end:
            return CheckpointPlan(branch, keep=True)
        grid = self.context.track_interval
        return CheckpointPlan(end // grid * grid) if end // grid * grid > start else None


class Leaky(NoCachePolicy):
    def insert(self, tokens, pages, checkpoints=None, *, salt=None):
        return list(pages[:-1])


class LeaksStates(ToyPrefixCache):
    def insert(self, tokens, pages, checkpoints=None, *, salt=None):
        kept = {p: s for p, s in (checkpoints or {}).items() if p % self.page_size == 0}
        return super().insert(tokens, pages, kept, salt=salt)  # off-grid slots vanish


class IgnoresSalts(ToyPrefixCache):
    def match(self, tokens, *, salt=None):
        return super().match(tokens, salt="tenant-a")


class StateAtTheKvEnd(ToyPrefixCache):
    """Reports the KV length with whatever state it has: the bug a hit must never have."""

    def match(self, tokens, *, salt=None):
        hit = super().match(tokens, salt=salt)
        n = 0
        while (salt, tuple(tokens[: (n + 1) * self.page_size])) in self.pages:
            n += 1
        return CacheHit(length=n * self.page_size, pages=tuple(
            self.pages[(salt, tuple(tokens[: (i + 1) * self.page_size]))] for i in range(n)),
            state_slot=hit.state_slot, branch=hit.branch)


def toy_spec(cls=ToyPrefixCache, **kw):
    return CachePolicySpec(name="toy", factory=lambda options, build: cls(options, build, **kw),
                           capabilities=CacheCapabilities(prefix_sharing=True, recurrent_state=True))


class TestToyPrefixCachePassesTheContract(CachePolicyContract):
    @pytest.fixture
    def spec(self):
        return toy_spec()


def _recurrent(cls, **kw):
    ledger = SlotLedger()
    return attach(cls(page_size=16, **kw), 16, ledger, 32), ledger


def test_a_cache_that_leaks_pages_fails_conservation():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="pages neither returned nor flushed"):
        contract.test_pages_are_conserved_through_insert_and_flush(attach(Leaky(), 16), 16)


def test_a_cache_that_evicts_locked_pages_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="evict freed pages of a locked hit"):
        contract.test_locked_hits_are_never_evicted(
            toy_spec(), attach(ToyPrefixCache(honour_locks=False), 16), 16)


def test_a_cache_that_claims_prefix_sharing_but_keeps_nothing_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="expected a 32-token hit, got 0"):
        contract.test_prefix_sharing_claim_finds_the_kept_pages(toy_spec(), attach(NoCachePolicy(), 16), 16)


def test_a_cache_that_shares_across_salts_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="another salt shared a prefix"):
        contract.test_requests_with_different_salts_never_share(
            toy_spec(), attach(IgnoresSalts(), 16), 16)


def test_a_cache_that_drops_checkpoint_slots_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="must be freed"):
        contract.test_checkpoint_slots_off_the_pages_or_past_the_tokens_are_freed(
            _recurrent(LeaksStates), 16)


def test_a_cache_that_hands_out_a_state_at_the_wrong_position_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="with a state at 32: hit 80"):
        contract.test_a_recurrent_hit_ends_at_the_deepest_position_with_kv_and_a_state(
            _recurrent(StateAtTheKvEnd), 16, 32)


def test_a_cache_that_evicts_a_locked_state_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="freed the state of a locked hit"):
        contract.test_a_locked_state_survives_eviction_and_kv_can_outlive_its_state(
            _recurrent(ToyPrefixCache, honour_locks=False), 16)
