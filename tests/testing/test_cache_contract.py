"""The cache contract passes a toy prefix cache and fails caches that leak or evict locked pages."""

from __future__ import annotations

import pytest

from hinge.builtin.no_cache import NoCachePolicy
from hinge.contracts import CacheHit, CachePolicy
from hinge.plugins import CacheCapabilities, CachePolicySpec
from hinge.testing import CachePolicyContract


class ToyPrefixCache(CachePolicy):
    """Full pages keyed by the whole token prefix up to them; LRU-free, refcounted locks."""

    def __init__(self, options=None, build=None, page_size=16, honour_locks=True):
        self.page_size = build.page_size if build is not None else page_size
        self.pages: dict[tuple[int, ...], int] = {}  # prefix through page end -> page id
        self.locks: dict[int, int] = {}
        self.honour_locks = honour_locks

    def match(self, tokens):
        pages, n = [], 0
        while (n + 1) * self.page_size <= len(tokens):
            page = self.pages.get(tuple(tokens[: (n + 1) * self.page_size]))
            if page is None:
                break
            pages.append(page)
            n += 1
        return CacheHit(length=n * self.page_size, pages=tuple(pages))

    def lock(self, hit):
        for p in hit.pages:
            self.locks[p] = self.locks.get(p, 0) + 1

    def unlock(self, hit):
        for p in hit.pages:
            self.locks[p] -= 1

    def insert(self, tokens, pages):
        back = []
        for i, page in enumerate(pages):
            key = tuple(tokens[: (i + 1) * self.page_size])
            if len(key) < (i + 1) * self.page_size or key in self.pages:
                back.append(page)
            else:
                self.pages[key] = page
        return back

    def _free(self, limit):
        # NOTE: free longest prefixes first so no kept page loses its parent
        freed = []
        for key in sorted(self.pages, key=len, reverse=True):
            if len(freed) >= limit:
                break
            page = self.pages[key]
            if self.locks.get(page, 0) and self.honour_locks:
                continue
            if any(len(k) > len(key) and k[: len(key)] == key for k in self.pages):
                continue
            freed.append(self.pages.pop(key))
        return freed

    def evict(self, num_pages):
        return self._free(num_pages)

    def flush(self):
        return self._free(len(self.pages))

    def num_evictable_pages(self):
        return sum(1 for p in self.pages.values() if not self.locks.get(p, 0))


class Leaky(NoCachePolicy):
    def insert(self, tokens, pages):
        return list(pages[:-1])


def toy_spec(**kw):
    return CachePolicySpec(name="toy", factory=lambda options, build: ToyPrefixCache(options, build, **kw),
                           capabilities=CacheCapabilities(prefix_sharing=True))


class TestToyPrefixCachePassesTheContract(CachePolicyContract):
    @pytest.fixture
    def spec(self):
        return toy_spec()


def test_a_cache_that_leaks_pages_fails_conservation():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="pages neither returned nor flushed"):
        contract.test_pages_are_conserved_through_insert_and_flush(Leaky(), 16)


def test_a_cache_that_evicts_locked_pages_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="evict freed pages of a locked hit"):
        contract.test_locked_hits_are_never_evicted(toy_spec(), ToyPrefixCache(honour_locks=False), 16)


def test_a_cache_that_claims_prefix_sharing_but_keeps_nothing_fails():
    contract = CachePolicyContract()
    with pytest.raises(AssertionError, match="expected a 32-token hit, got 0"):
        contract.test_prefix_sharing_claim_finds_the_kept_pages(toy_spec(), NoCachePolicy(), 16)
