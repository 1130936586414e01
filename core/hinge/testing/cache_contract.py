"""CachePolicyContract: pages are conserved (every page offered comes back exactly once), hits
are page aligned and never exceed the tokens, locked hits survive eviction, and a policy that
claims prefix sharing finds what it kept."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hinge.testing.base import ContractBase


class PageLedger:
    """Tracks pages handed to the policy and pages it handed back; each page once."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.next_page = 1
        self.offered: set[int] = set()
        self.returned: set[int] = set()

    def new_pages(self, num_tokens: int) -> list[int]:
        n = -(-num_tokens // self.page_size)
        pages = list(range(self.next_page, self.next_page + n))
        self.next_page += n
        return pages

    def offer(self, policy: Any, tokens: list[int], pages: list[int]) -> list[int]:
        self.offered |= set(pages)
        back = list(policy.insert(tokens, pages))
        self.take_back(back, f"insert of {len(tokens)} tokens")
        assert set(back) <= set(pages), f"insert returned pages it was not given: {set(back) - set(pages)}"
        return back

    def take_back(self, pages: list[int], where: str) -> None:
        dup = [p for p in pages if p in self.returned] + [p for p in set(pages) if pages.count(p) > 1]
        assert not dup, f"{where} returned pages already returned: {sorted(set(dup))}"
        unknown = set(pages) - self.offered
        assert not unknown, f"{where} returned pages never offered: {sorted(unknown)}"
        self.returned |= set(pages)

    def held(self) -> set[int]:
        return self.offered - self.returned


def check_hit(hit: Any, tokens: list[int], page_size: int) -> None:
    assert hit.length % page_size == 0, f"hit length {hit.length} is not a multiple of {page_size}"
    assert 0 <= hit.length <= len(tokens), f"hit length {hit.length} for {len(tokens)} tokens"
    assert len(hit.pages) == hit.length // page_size, (
        f"hit of {hit.length} tokens has {len(hit.pages)} pages (page_size {page_size})")


class CachePolicyContract(ContractBase):
    """Subclass with a ``spec`` fixture returning your CachePolicySpec."""

    @pytest.fixture
    def page_size(self, spec) -> int:
        return 16 * spec.capabilities.page_size_multiple

    def test_an_empty_cache_misses(self, component, page_size):
        hit = component.match(list(range(50)))
        check_hit(hit, list(range(50)), page_size)
        assert hit.length == 0 and tuple(hit.pages) == ()

    def test_pages_are_conserved_through_insert_and_flush(self, component, page_size):
        ledger = PageLedger(page_size)
        for n in (40, 16, 3):
            tokens = list(range(100, 100 + n))
            ledger.offer(component, tokens, ledger.new_pages(n))
        ledger.take_back(list(component.flush()), "flush")
        assert ledger.held() == set(), f"pages neither returned nor flushed: {sorted(ledger.held())}"

    def test_prefix_sharing_claim_finds_the_kept_pages(self, spec, component, page_size):
        if not spec.capabilities.prefix_sharing:
            pytest.skip(f"{spec.name!r} does not claim prefix_sharing")
        ledger = PageLedger(page_size)
        tokens = list(range(7, 7 + 2 * page_size + 5))
        pages = ledger.new_pages(len(tokens))
        ledger.offer(component, tokens, pages)
        query = tokens + [999]
        hit = component.match(query)
        check_hit(hit, query, page_size)
        assert hit.length == 2 * page_size, f"expected a {2 * page_size}-token hit, got {hit.length}"
        assert list(hit.pages) == pages[:2], f"hit pages {list(hit.pages)} != inserted {pages[:2]}"
        other = component.match([123456] + tokens)
        assert other.length == 0, "a different first token must miss"

    def test_no_prefix_sharing_means_insert_returns_every_page(self, spec, component, page_size):
        if spec.capabilities.prefix_sharing:
            pytest.skip(f"{spec.name!r} claims prefix_sharing")
        pages = [3, 4, 5]
        assert sorted(component.insert(list(range(40)), pages)) == pages
        assert component.match(list(range(41))).length == 0

    def test_locked_hits_are_never_evicted(self, spec, component, page_size):
        if not spec.capabilities.prefix_sharing:
            pytest.skip(f"{spec.name!r} does not claim prefix_sharing")
        ledger = PageLedger(page_size)
        a = list(range(0, 3 * page_size))
        b = list(range(5000, 5000 + 3 * page_size))
        ledger.offer(component, a, ledger.new_pages(len(a)))
        ledger.offer(component, b, ledger.new_pages(len(b)))
        hit = component.match(a + [1])
        component.lock(hit)
        freed = list(component.evict(10**6))
        ledger.take_back(freed, "evict")
        assert not set(freed) & set(hit.pages), "evict freed pages of a locked hit"
        component.unlock(hit)
        ledger.take_back(list(component.evict(10**6)) + list(component.flush()), "evict after unlock")
        assert ledger.held() == set(), f"pages still held after unlock + evict + flush: {sorted(ledger.held())}"

    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_random_operations_conserve_pages(self, build_component, page_size, seed):
        """Inserts with shared prefixes, matches, locks, evictions: each page comes back once."""
        component = build_component()
        rng = random.Random(seed)
        ledger = PageLedger(page_size)
        prefixes = [[rng.randrange(50) for _ in range(rng.randrange(1, 3 * page_size))] for _ in range(4)]
        locked: list[Any] = []
        for step in range(60):
            op = rng.random()
            tokens = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(0, 2 * page_size))]
            if op < 0.45:
                ledger.offer(component, tokens, ledger.new_pages(len(tokens)))
            elif op < 0.7:
                hit = component.match(tokens)
                check_hit(hit, tokens, page_size)
                assert not set(hit.pages) & ledger.returned, f"step {step}: hit uses freed pages"
                if hit.length and rng.random() < 0.5:
                    component.lock(hit)
                    locked.append(hit)
            elif op < 0.85 and locked:
                component.unlock(locked.pop(rng.randrange(len(locked))))
            else:
                want = rng.randrange(1, 4)
                evictable = component.num_evictable_pages()
                freed = list(component.evict(want))
                ledger.take_back(freed, f"step {step}: evict({want})")
                if evictable >= want:
                    assert len(freed) >= want, f"evict({want}) freed {len(freed)} with {evictable} evictable"
                for h in locked:
                    assert not set(freed) & set(h.pages), f"step {step}: evicted a locked page"
        for h in locked:
            component.unlock(h)
        ledger.take_back(list(component.flush()), "final flush")
        assert ledger.held() == set(), f"pages leaked: {sorted(ledger.held())}"

    def test_recurrent_state_claim(self, spec):
        if not spec.capabilities.recurrent_state:
            pytest.skip(f"{spec.name!r} does not claim recurrent_state")
        pytest.skip("recurrent-state checkpoints need the state pool; the kit does not test them yet")
