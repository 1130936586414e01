"""CachePolicyContract: pages are conserved (every page offered comes back exactly once), hits
are page aligned and never exceed the tokens, locked hits survive eviction, a policy that claims
prefix sharing finds what it kept and keeps salts apart, and a policy that claims recurrent state
keeps checkpoints right: a hit ends at the deepest position with KV and a state, every checkpoint
slot offered is kept or freed exactly once, locked states survive eviction, KV may outlive its
state, and planned checkpoints sit on page boundaries inside the step. A policy that caches
running requests (``caches_unfinished``) keeps their prefixes locked until they leave, lets other
requests hit them, and hands a request the pages it already held so the request's copies go back.

Every component is attached the way the engine attaches it (``CachePolicy.attach`` with a
``CacheContext``); recurrent-state tests attach a ``SlotLedger`` as the checkpoint region."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hinge.contracts import CacheContext, CacheHit
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

    def offer_with_states(self, policy: Any, tokens: list[int], pages: list[int],
                          checkpoints: dict[int, int]) -> list[int]:
        self.offered |= set(pages)
        back = list(policy.insert(tokens, pages, checkpoints))
        self.take_back(back, f"insert of {len(tokens)} tokens")
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


class PagesView:
    """The page allocator as a policy sees it (read only): a large pool."""

    num_usable = 10_000
    num_free = 10_000


class SlotLedger:
    """A checkpoint region for tests (``hinge.contracts.CheckpointSlots``): hands out slots
    ``first..first+count-1`` and checks that each is freed at most once and only after being
    handed out; ``held()`` is what nobody freed yet."""

    def __init__(self, first: int = 100, count: int = 256) -> None:
        self.num_total = count
        self._free = list(range(first + count - 1, first - 1, -1))
        self.handed: set[int] = set()
        self.freed: list[int] = []

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self.handed)

    def allocate(self) -> int | None:
        if not self._free:
            return None
        slot = self._free.pop()
        self.handed.add(slot)
        return slot

    def free(self, slot: int) -> None:
        assert slot in self.handed, f"checkpoint slot {slot} freed but not held (double free?)"
        self.handed.remove(slot)
        self.freed.append(slot)
        self._free.append(slot)

    def held(self) -> set[int]:
        return set(self.handed)


def attach(component: Any, page_size: int, slots: SlotLedger | None = None,
           track_interval: int = 0) -> Any:
    """Attach ``component`` as the engine does: dense (no checkpoint region) or hybrid."""
    component.attach(CacheContext(page_size=page_size, pages=PagesView(),
                                  track_interval=track_interval if slots is not None else 0,
                                  checkpoint_slots=slots))
    return component


class CachePolicyContract(ContractBase):
    """Subclass with a ``spec`` fixture returning your CachePolicySpec."""

    @pytest.fixture
    def page_size(self, spec) -> int:
        return 16 * spec.capabilities.page_size_multiple

    @pytest.fixture
    def track_interval(self, page_size) -> int:
        """The checkpoint grid the recurrent-state tests attach with (a multiple of the page)."""
        return 2 * page_size

    @pytest.fixture
    def component(self, build_component, page_size) -> Any:
        return attach(build_component(), page_size)

    @pytest.fixture
    def recurrent(self, spec, build_component, page_size, track_interval):
        """(component attached with a checkpoint region, the region's ledger); skips unless the
        spec claims recurrent_state."""
        if not spec.capabilities.recurrent_state:
            pytest.skip(f"{spec.name!r} does not claim recurrent_state")
        ledger = SlotLedger()
        return attach(build_component(), page_size, ledger, track_interval), ledger

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
        component = attach(build_component(), page_size)
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


    def test_requests_with_different_salts_never_share(self, spec, component, page_size):
        if not spec.capabilities.prefix_sharing:
            pytest.skip(f"{spec.name!r} does not claim prefix_sharing")
        ledger = PageLedger(page_size)
        tokens = list(range(3, 3 + 3 * page_size))
        pages = ledger.new_pages(len(tokens))
        ledger.offered |= set(pages)
        ledger.take_back(list(component.insert(tokens, pages, salt="tenant-a")), "insert")
        query = tokens + [1]
        assert component.match(query, salt="tenant-a").length == 3 * page_size
        assert component.match(query, salt="tenant-b").length == 0, "another salt shared a prefix"
        assert component.match(query).length == 0, "no salt shared a salted prefix"
        ledger.take_back(list(component.flush()), "flush")
        assert ledger.held() == set()

    # -- recurrent state (hybrid models) ------------------------------------------------------

    def test_a_recurrent_hit_ends_at_the_deepest_position_with_kv_and_a_state(
            self, recurrent, page_size, track_interval):
        component, slots = recurrent
        pages = PageLedger(page_size)
        tokens = list(range(1000, 1000 + 5 * page_size))
        first = slots.allocate()
        pages.offer_with_states(component, tokens, pages.new_pages(len(tokens)), {2 * page_size: first})
        hit = component.match(tokens + [7])
        check_hit(hit, tokens + [7], page_size)
        assert (hit.length, hit.state_slot) == (2 * page_size, first), (
            f"KV of {len(tokens)} tokens with a state at {2 * page_size}: hit {hit.length} with "
            f"state {hit.state_slot}, want {2 * page_size} with state {first}")
        assert hit.branch is not None and hit.branch % track_interval == 0 and \
            2 * page_size < hit.branch <= 5 * page_size, f"branch point {hit.branch} for KV past the state"
        deeper = slots.allocate()
        pages.offer_with_states(component, tokens, pages.new_pages(len(tokens)), {4 * page_size: deeper})
        hit = component.match(tokens + [7])
        assert (hit.length, hit.state_slot) == (4 * page_size, deeper)
        short = component.match(tokens[:4 * page_size - 1])
        assert (short.length, short.state_slot) == (2 * page_size, first), "a state past the tokens was used"
        assert component.match(list(range(1, 50))).state_slot is None

    def test_checkpoint_slots_off_the_pages_or_past_the_tokens_are_freed(self, recurrent, page_size):
        component, slots = recurrent
        pages = PageLedger(page_size)
        tokens = list(range(10, 10 + 3 * page_size + 3))
        odd, past, kept = slots.allocate(), slots.allocate(), slots.allocate()
        pages.offer_with_states(component, tokens, pages.new_pages(len(tokens)),
                                {page_size + 1: odd, 4 * page_size: past, 3 * page_size: kept})
        assert {odd, past} <= set(slots.freed) and kept in slots.held(), (
            f"freed {slots.freed}: a state at {page_size + 1} (off a page) and at {4 * page_size} "
            f"(past {len(tokens)} tokens) must be freed, the one at {3 * page_size} kept")
        again = slots.allocate()
        pages.offer_with_states(component, tokens, pages.new_pages(len(tokens)), {3 * page_size: again})
        assert again in slots.freed and kept in slots.held(), "a second state for one position is freed"
        pages.take_back(list(component.flush()), "flush")
        assert slots.held() == set() and pages.held() == set()

    def test_a_locked_state_survives_eviction_and_kv_can_outlive_its_state(self, recurrent, page_size):
        component, slots = recurrent
        pages = PageLedger(page_size)
        a = list(range(0, 4 * page_size))
        b = list(range(5000, 5000 + 4 * page_size))
        sa, sb = slots.allocate(), slots.allocate()
        pages.offer_with_states(component, a, pages.new_pages(len(a)), {4 * page_size: sa})
        pages.offer_with_states(component, b, pages.new_pages(len(b)), {4 * page_size: sb})
        hit = component.match(a + [1])
        assert hit.state_slot == sa
        component.lock(hit)
        freed = component.evict_checkpoints(10)
        assert sa in slots.held(), "evict_checkpoints freed the state of a locked hit"
        assert freed == 1 and sb in slots.freed, f"evict_checkpoints(10) freed {freed}, want b's one"
        assert component.match(b + [1]).state_slot is None, "a hit used an evicted state"
        assert component.num_evictable_pages() >= 4, "KV without its state must stay cached"
        pages.take_back(list(component.evict(10**6)), "evict")
        assert sa in slots.held() and component.match(a + [1]).state_slot == sa
        component.unlock(hit)
        pages.take_back(list(component.flush()), "flush")
        assert slots.held() == set() and pages.held() == set(), "flush keeps nothing unlocked"

    @pytest.mark.parametrize("seed", [0, 1])
    def test_random_operations_conserve_checkpoint_slots(self, recurrent, page_size, seed):
        component, slots = recurrent
        rng = random.Random(seed)
        pages = PageLedger(page_size)
        stems = [[rng.randrange(30) for _ in range(rng.randrange(1, 4 * page_size))] for _ in range(3)]
        locked: list[Any] = []
        for step in range(80):
            tokens = rng.choice(stems) + [rng.randrange(30) for _ in range(rng.randrange(0, 3 * page_size))]
            op = rng.random()
            if op < 0.45:
                states = {}
                for _ in range(rng.randrange(0, 3)):
                    position = rng.randrange(1, len(tokens) + page_size)
                    if position not in states and (slot := slots.allocate()) is not None:
                        states[position] = slot
                pages.offer_with_states(component, tokens, pages.new_pages(len(tokens)), states)
            elif op < 0.65:
                hit = component.match(tokens)
                check_hit(hit, tokens, page_size)
                if hit.state_slot is not None:
                    assert hit.state_slot in slots.held(), f"step {step}: a hit used a freed state"
                if hit.length and rng.random() < 0.5:
                    component.lock(hit)
                    locked.append(hit)
            elif op < 0.8 and locked:
                component.unlock(locked.pop(rng.randrange(len(locked))))
            elif op < 0.9:
                component.evict_checkpoints(rng.randrange(1, 3))
            else:
                pages.take_back(list(component.evict(rng.randrange(1, 4))), f"step {step}: evict")
            for h in locked:
                assert h.state_slot is None or h.state_slot in slots.held(), \
                    f"step {step}: the state of a locked hit was freed"
        for h in locked:
            component.unlock(h)
        pages.take_back(list(component.flush()), "final flush")
        assert pages.held() == set(), f"pages leaked: {sorted(pages.held())}"
        assert slots.held() == set(), f"checkpoint slots leaked: {sorted(slots.held())}"

    def test_planned_checkpoints_sit_on_pages_inside_the_step(self, recurrent, page_size, track_interval):
        component, _ = recurrent
        planned = 0
        for start, end in [(0, 3 * track_interval + 5), (track_interval - 1, track_interval + 1),
                           (5, 6), (track_interval, 2 * track_interval)]:
            plan = component.plan_checkpoint(start, end)
            if plan is None:
                continue
            planned += 1
            assert start < plan.position <= end and plan.position % page_size == 0, (
                f"step over {start}..{end}: checkpoint at {plan.position}")
        assert planned, "a policy claiming recurrent_state never plans a checkpoint"
        branch = component.plan_checkpoint(0, 3 * track_interval, branch=track_interval)
        assert branch is not None and branch.position == track_interval and branch.keep, (
            "a branch point inside the step is where the checkpoint goes, and it is kept")

    # -- running requests (caches_unfinished) -------------------------------------------------

    def test_a_running_requests_prefix_is_shared_locked_and_its_copies_go_back(self, spec, component,
                                                                             page_size):
        """Request A inserts after each of two chunks (lock moved, not held twice); B, admitted
        meanwhile, hits A's pages; C, which computed the same tokens on its own pages, switches
        to A's and its copies are the caller's to free; after everyone leaves, a flush returns
        every page exactly once."""
        if not getattr(component, "caches_unfinished", False):
            pytest.skip(f"{spec.name!r} does not cache unfinished requests")
        ledger = PageLedger(page_size)
        tokens = list(range(300, 300 + 5 * page_size + 3))

        def running(hit, upto: int, pages: list[int]):
            ledger.offered |= set(pages)
            new = component.insert_unfinished(tokens[:upto], pages[:upto // page_size], hit)
            check_hit(new, tokens, page_size)
            assert new.length == upto, f"{upto} tokens offered, the request's hit covers {new.length}"
            copies = [p for p, q in zip(pages[:len(new.pages)], new.pages, strict=True) if p != q]
            ledger.take_back(copies, "the running request's copies")
            return new, list(new.pages) + pages[len(new.pages):]

        a_pages = ledger.new_pages(len(tokens))
        a_hit = component.match(tokens)
        component.lock(a_hit)
        a_hit, a_pages = running(a_hit, 2 * page_size, a_pages)
        assert list(a_hit.pages) == a_pages[:2], "a new prefix keeps the request's own pages"
        a_hit, a_pages = running(a_hit, 4 * page_size, a_pages)
        ledger.take_back(list(component.evict(10**6)), "evict while A runs")
        assert not set(a_pages[:4]) & ledger.returned, "evict freed pages a running request holds"
        b = component.match(tokens[:3 * page_size + 1])
        assert b.length == 3 * page_size and list(b.pages) == a_pages[:3], (
            f"B hit {b.length} tokens on {list(b.pages)}, want A's {a_pages[:3]}")
        c_pages = ledger.new_pages(len(tokens))  # C computed the same tokens cold, meanwhile
        c_hit, c_pages = running(CacheHit(), 4 * page_size, c_pages)
        assert c_pages[:4] == a_pages[:4], "C must switch to the pages the policy already held"
        for hit, pages in ((a_hit, a_pages), (c_hit, c_pages)):  # both leave
            ledger.offer(component, tokens, pages)
            component.unlock(hit)
        ledger.take_back(list(component.flush()), "flush")
        assert ledger.held() == set(), f"pages neither returned nor flushed: {sorted(ledger.held())}"
