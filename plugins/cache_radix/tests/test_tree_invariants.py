"""Random sequences of insert / insert_unfinished (a running request: admitted with a locked hit,
then its prefix offered) / match / lock / unlock / evict / evict_checkpoints / flush keep the
radix tree consistent, never evict what is locked, free exactly what they evict, and leak no
page and no checkpoint slot (hypothesis state machine against an independent oracle: a dict of
cached page prefixes and of states by position)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from hinge.testing.cache_contract import SlotLedger, attach
from hinge_radix.cache import RadixCache

TOKENS = st.lists(st.integers(0, 2), min_size=0, max_size=10)
SALTS = st.sampled_from([None, "a"])


class RadixMachine(RuleBasedStateMachine):
    seqs = Bundle("seqs")  #: token lists inserted so far: matches and inserts extend them

    @initialize(page_size=st.sampled_from([1, 2, 4]), recurrent=st.booleans())
    def build(self, page_size, recurrent):
        self.ps = page_size
        self.slots = SlotLedger(first=1000, count=64) if recurrent else None
        self.cache = attach(RadixCache(None, SimpleNamespace(page_size=page_size)), page_size,
                            self.slots, 2 * page_size)
        self.next_page = 1
        self.held: set[int] = set()  # pages the cache holds (offered, not returned)
        self.kv: dict[tuple, int] = {}  # oracle: (salt, tokens through a page end) -> page
        self.states: dict[tuple, int] = {}  # oracle: (salt, tokens up to a state) -> slot
        self.locked: list = []

    # -- helpers ----------------------------------------------------------------------------

    def _oracle_kv_len(self, tokens, salt) -> int:
        n = 0
        while (n + 1) * self.ps <= len(tokens) and (salt, tuple(tokens[:(n + 1) * self.ps])) in self.kv:
            n += 1
        return n * self.ps

    def _forget_pages(self, freed) -> None:
        gone = set(freed)
        assert gone <= self.held, f"freed pages the cache did not hold: {sorted(gone - self.held)}"
        assert len(gone) == len(freed), "a page was freed twice"
        self.held -= gone
        self.kv = {k: p for k, p in self.kv.items() if p not in gone}
        self._sync_states()

    def _sync_states(self) -> None:
        if self.slots is not None:
            live = self.slots.held()
            self.states = {k: s for k, s in self.states.items() if s in live}

    # -- rules ------------------------------------------------------------------------------

    @rule(target=seqs, tokens=TOKENS, salt=SALTS, marks=st.lists(st.integers(1, 16), max_size=3))
    def insert_new(self, tokens, salt, marks):
        return self.insert(tokens, salt, marks)

    @rule(target=seqs, base=seqs, more=TOKENS, cut=st.integers(0, 14), salt=SALTS,
          marks=st.lists(st.integers(1, 24), max_size=3))
    def insert_sharing(self, base, more, cut, salt, marks):
        return self.insert(base[:cut] + more, salt, marks)

    def insert(self, tokens, salt, marks):
        n_pages = -(-len(tokens) // self.ps)
        pages = list(range(self.next_page, self.next_page + n_pages))
        self.next_page += n_pages
        checkpoints = {}
        if self.slots is not None:
            for m in marks:
                if m not in checkpoints and (slot := self.slots.allocate()) is not None:
                    checkpoints[m] = slot
        before_states = dict(self.states)
        back = self.cache.insert(tokens, pages, checkpoints, salt=salt)
        assert set(back) <= set(pages) and len(set(back)) == len(back)
        kept = set(pages) - set(back)
        full = len(tokens) // self.ps
        for i in range(full):
            key = (salt, tuple(tokens[:(i + 1) * self.ps]))
            if key not in self.kv:
                assert pages[i] in kept, f"page {pages[i]} of a new prefix was not kept"
                self.kv[key] = pages[i]
            else:
                assert pages[i] not in kept, "a prefix the tree had got a second page"
        assert not (kept - set(pages[:full])), "kept a page past the whole pages of the tokens"
        self.held |= kept
        for position, slot in checkpoints.items():
            key = (salt, tuple(tokens[:position]))
            should_keep = position % self.ps == 0 and position <= full * self.ps and key not in before_states
            if should_keep:
                assert slot in self.slots.held(), f"state at {position} was not kept"
                self.states[key] = slot
            else:
                assert slot not in self.slots.held(), f"state at {position} should have been freed"
        return tokens

    @rule(target=seqs, base=seqs, more=TOKENS, cut=st.integers(0, 14), salt=SALTS,
          marks=st.lists(st.integers(1, 24), max_size=3))
    def insert_running(self, base, more, cut, salt, marks):
        """Admission (match + lock), then the request's computed whole pages offered while it
        runs: the tree's pages where it had them (the request's copies are the caller's to
        free), the request's otherwise; its lock moves to the new hit."""
        tokens = base[:cut] + more
        full = len(tokens) // self.ps
        hit = self.cache.match(tokens, salt=salt)
        self.cache.lock(hit)
        fresh = list(range(self.next_page, self.next_page + full - len(hit.pages)))
        self.next_page += len(fresh)
        pages = list(hit.pages) + fresh
        checkpoints = {}
        if self.slots is not None:
            for m in marks:
                if m not in checkpoints and (slot := self.slots.allocate()) is not None:
                    checkpoints[m] = slot
        before_states = dict(self.states)
        new = self.cache.insert_unfinished(tokens[:full * self.ps], pages, hit, checkpoints, salt=salt)
        assert new.length == full * self.ps and len(new.pages) == full and new.state_slot is None
        for i in range(full):
            key = (salt, tuple(tokens[:(i + 1) * self.ps]))
            if key not in self.kv:
                self.kv[key] = pages[i]
                self.held.add(pages[i])
            assert new.pages[i] == self.kv[key], f"page {i}: the request must use the tree's page"
        for position, slot in checkpoints.items():
            key = (salt, tuple(tokens[:position]))
            if position % self.ps == 0 and position <= full * self.ps and key not in before_states:
                assert slot in self.slots.held(), f"state at {position} was not kept"
                self.states[key] = slot
            else:
                assert slot not in self.slots.held(), f"state at {position} should have been freed"
        if new.handle is not None:  # an empty hit locks nothing
            self.locked.append(new)
        return tokens

    @rule(base=seqs, more=TOKENS, cut=st.integers(0, 24), salt=SALTS, lock=st.booleans())
    def match(self, base, more, cut, salt, lock):
        tokens = base[:cut] + more
        hit = self.cache.match(tokens, salt=salt)
        kv_len = self._oracle_kv_len(tokens, salt)
        assert hit.length % self.ps == 0 and len(hit.pages) == hit.length // self.ps
        if self.slots is None:
            assert hit.length == kv_len, f"hit {hit.length}, the oracle holds {kv_len}"
        else:
            want = max((p for p in range(self.ps, kv_len + 1, self.ps)
                        if (salt, tuple(tokens[:p])) in self.states), default=0)
            assert hit.length == want, f"hit {hit.length}, deepest state with KV at {want}"
            if want:
                assert hit.state_slot == self.states[(salt, tuple(tokens[:want]))]
        assert list(hit.pages) == [self.kv[(salt, tuple(tokens[:(i + 1) * self.ps]))]
                                   for i in range(hit.length // self.ps)]
        if lock and hit.length:
            self.cache.lock(hit)
            self.locked.append(hit)

    @precondition(lambda self: self.locked)
    @rule(data=st.data())
    def unlock(self, data):
        hit = self.locked.pop(data.draw(st.integers(0, len(self.locked) - 1)))
        self.cache.unlock(hit)

    @rule(n=st.integers(1, 6))
    def evict(self, n):
        evictable = self.cache.num_evictable_pages()
        freed = self.cache.evict(n)
        locked_pages = {p for h in self.locked for p in h.pages}
        assert not set(freed) & locked_pages, "evicted a locked page"
        if evictable >= n:
            assert len(freed) >= n, f"evict({n}) freed {len(freed)} of {evictable} evictable"
        self._forget_pages(freed)

    @precondition(lambda self: self.slots is not None)
    @rule(n=st.integers(1, 3))
    def evict_checkpoints(self, n):
        before = self.slots.held()
        freed = self.cache.evict_checkpoints(n)
        gone = before - self.slots.held()
        assert len(gone) == freed <= n
        locked_states = {h.state_slot for h in self.locked}
        assert not gone & locked_states, "evicted the state of a locked hit"
        self._sync_states()

    @rule()
    def flush(self):
        self._forget_pages(self.cache.flush())
        assert all(n.lock > 0 for n in self.cache.tree.nodes()), "flush kept an unlocked node"
        if self.slots is not None:
            locked_states = {h.state_slot for h in self.locked} - {None}
            assert self.slots.held() == locked_states, "flush kept a state no hit locks"

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def tree_is_consistent_and_leaks_nothing(self):
        tree = self.cache.tree
        nodes = list(tree.nodes())
        pages = [p for n in nodes for p in n.pages]
        assert len(pages) == len(set(pages)) == tree.num_pages, "a page is in the tree twice"
        assert set(pages) == self.held, "tree pages and pages offered minus returned differ"
        assert set(self.kv.values()) == self.held
        assert tree.num_nodes == len(nodes)
        assert tree.num_unlocked_pages == sum(len(n.pages) for n in nodes if n.lock == 0)
        for n in nodes:
            assert n.key and len(n.key) == len(n.pages) * self.ps
            assert n.depth == n.parent.depth + len(n.key)
            assert n.parent.children[tuple(n.key[:self.ps])] is n
            assert n.parent.parent is None or n.parent.lock >= n.lock, "a lock does not reach the root"
            assert n.parent.parent is None or n.last_used >= 0
        want_locks: dict[int, int] = {}
        for h in self.locked:
            node = h.handle
            while node.parent is not None:
                want_locks[id(node)] = want_locks.get(id(node), 0) + 1
                node = node.parent
        assert all(n.lock == want_locks.get(id(n), 0) for n in nodes), "lock counts drifted"
        states = [n.state for n in nodes if n.state is not None]
        assert len(states) == tree.num_states
        if self.slots is not None:
            assert set(states) == self.slots.held() == set(self.states.values()), "checkpoint slot leak"


TestRadixTreeInvariants = RadixMachine.TestCase
TestRadixTreeInvariants.settings = settings(max_examples=80, stateful_step_count=50, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
