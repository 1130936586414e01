"""``RadixCache``: the prefix cache policy ``radix`` over ``hinge_radix.tree.RadixTree``.

Dense models: a hit is the longest cached prefix, in whole pages. Hybrid models (the context has
a checkpoint region and a ``track_interval``): a hit is the deepest position where KV and a state
checkpoint both exist (a state holds every recurrent layer's conv window and SSM state); KV matched
past it is reported as a branch point on the checkpoint grid, so the next prefill keeps a
checkpoint there. Checkpoints are planned on the grid: a running request keeps the one at the last
multiple of ``track_interval`` it passed (``plan_checkpoint``), branch points besides.

Running requests (``insert_unfinished``, on unless ``cache_options = {insert_unfinished = false}``):
after each prefill chunk that leaves prompt tokens to go, the scheduler offers the request's computed
whole pages (and its confirmed checkpoints it no longer reads); they become tree nodes, locked by
the request (its lock moves to the new deepest node), so a request admitted meanwhile hits them.
Where the tree already held some of those pages, the request switches to the tree's and the
scheduler frees its copies (sglang's ``cache_unfinished_req``). Hybrid models: a KV-only node past
the last state is fine (a hit stops at the deepest state; the KV makes a branch point).

Eviction: ``evict`` frees unlocked leaves, least recently used first, with their states;
``evict_checkpoints`` frees states only (least recently used first), leaving their KV cached.
Slots handed to ``insert`` are the cache's: kept in the tree, or freed into the checkpoint region
at once (a position not on a page boundary or past the tokens, or already holding a state).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hinge.contracts import CacheHit, CachePolicy, CheckpointPlan
from hinge_radix.plugin import RADIX_SPEC
from hinge_radix.tree import Node, RadixTree


class RadixCache(CachePolicy):
    capabilities = RADIX_SPEC.capabilities

    def __init__(self, options: Any = None, build: Any = None) -> None:
        self.options = options
        self.page_size = build.page_size if build is not None else 16
        self.tree = RadixTree(self.page_size)
        self.evicted_pages = 0
        self.evicted_checkpoints = 0
        self.inserted_checkpoints = 0

    def attach(self, context) -> None:
        """The engine's pools (once, before any request): page size, checkpoint region, grid."""
        super().attach(context)
        self.page_size = context.page_size
        self.tree = RadixTree(self.page_size)

    # -- context ------------------------------------------------------------------------------

    @property
    def recurrent(self) -> bool:
        return self.context is not None and self.context.recurrent

    def _free_slot(self, slot: int) -> None:
        assert self.context is not None and self.context.checkpoint_slots is not None, (
            f"checkpoint slot {slot} offered to a radix cache attached without a checkpoint region")
        self.context.checkpoint_slots.free(slot)

    # -- lookup -------------------------------------------------------------------------------

    def match(self, tokens: list[int], *, salt: str | None = None) -> CacheHit:
        walk = self.tree.walk(tokens, salt)
        touched = walk.path + ([walk.partial] if walk.partial is not None else [])
        self.tree.touch(touched)
        if not self.recurrent:
            node = walk.partial if walk.partial is not None else (walk.path[-1] if walk.path else None)
            return CacheHit(length=walk.num_pages() * self.page_size, pages=tuple(walk.pages()),
                            handle=node)
        kv_len = walk.num_pages() * self.page_size
        deepest = next((i for i in range(len(walk.path) - 1, -1, -1)
                        if walk.path[i].state is not None), None)
        grid = self.context.track_interval
        branch = kv_len // grid * grid
        if deepest is None:
            return CacheHit(branch=branch or None)
        node = walk.path[deepest]
        pages = tuple(p for n in walk.path[:deepest + 1] for p in n.pages)
        return CacheHit(length=node.depth, pages=pages, state_slot=node.state,
                        branch=branch if branch > node.depth else None, handle=node)

    def lock(self, hit: CacheHit) -> None:
        node: Node | None = hit.handle
        if node is None:
            return
        self.tree.lock(node, +1)
        if hit.state_slot is not None:
            node.state_lock += 1

    def unlock(self, hit: CacheHit) -> None:
        node: Node | None = hit.handle
        if node is None:
            return
        self.tree.lock(node, -1)
        if hit.state_slot is not None:
            node.state_lock -= 1
            assert node.state_lock >= 0, f"{node}: state unlocked more often than locked"

    @property
    def caches_unfinished(self) -> bool:
        return getattr(self.options, "insert_unfinished", True)

    # -- insert -------------------------------------------------------------------------------

    def insert(self, tokens: list[int], pages: list[int],
               checkpoints: Mapping[int, int] | None = None, *, salt: str | None = None) -> list[int]:
        ps, tree = self.page_size, self.tree
        num_full = len(tokens) // ps
        assert len(pages) >= num_full, f"{len(tokens)} tokens need {num_full} pages, got {len(pages)}"
        returned = list(pages[num_full:])
        node = tree.root(salt, create=True) if num_full else None
        path: list[Node] = []
        at = 0
        while at < num_full:
            child = node.children.get(tree._page_key(tokens, at))
            if child is None:
                child = tree.add_leaf(node, tuple(tokens[at * ps:num_full * ps]), pages[at:num_full])
                path.append(child)
                break
            m = tree._common_pages(child, tokens, at, num_full)
            if m < len(child.pages):
                child = tree.split(child, m)
            # NOTE: the request's own hit pages are the tree's: only other copies go back
            returned += [p for p, q in zip(pages[at:at + m], child.pages, strict=True) if p != q]
            path.append(child)
            node, at = child, at + m
        tree.touch(path)
        for position, slot in sorted((checkpoints or {}).items()):
            self._insert_state(tokens, salt, position, slot, num_full * ps)
        return returned

    def insert_unfinished(self, tokens: list[int], pages: list[int], hit: CacheHit,
                          checkpoints: Mapping[int, int] | None = None, *,
                          salt: str | None = None) -> CacheHit:
        """A running request's whole pages become tree nodes (``CachePolicy.insert_unfinished``);
        its lock moves to the deepest one: locking it first, then unlocking ``hit`` (an ancestor
        or the same path), keeps every page of the path locked throughout. What ``insert``
        returns (the request's copies of pages the tree held already) is not freed here: the
        caller switches the request to ``new.pages`` first, then frees its copies."""
        num_full = len(tokens) // self.page_size
        tokens = list(tokens[:num_full * self.page_size])
        assert len(pages) >= num_full, f"{len(tokens)} tokens need {num_full} pages, got {len(pages)}"
        self.insert(tokens, list(pages[:num_full]), checkpoints, salt=salt)
        walk = self.tree.walk(tokens, salt)
        assert walk.partial is None and walk.num_pages() == num_full, (
            f"{num_full} pages inserted, the tree holds {walk.num_pages()} of them")
        new = CacheHit(length=len(tokens), pages=tuple(walk.pages()), branch=hit.branch,
                       handle=walk.path[-1] if walk.path else None)
        self.lock(new)
        self.unlock(hit)
        return new

    def _insert_state(self, tokens: list[int], salt: str | None, position: int, slot: int,
                      limit: int) -> None:
        node = None
        if self.recurrent and 0 < position <= limit and position % self.page_size == 0:
            node = self.tree.node_ending_at(tokens, salt, position)
        if node is None or node.state is not None:
            self._free_slot(slot)  # NOTE: off the grid, past the tokens, or a state is there already
            return
        node.state = slot
        self.tree.num_states += 1
        self.inserted_checkpoints += 1

    # -- eviction -----------------------------------------------------------------------------

    def evict(self, num_pages: int) -> list[int]:
        import heapq

        freed: list[int] = []
        heap = self.tree.evictable_leaves()
        while heap and len(freed) < num_pages:
            _, _, leaf = heapq.heappop(heap)
            freed += leaf.pages
            self._drop_state(leaf)
            parent = leaf.parent
            self.tree.remove_leaf(leaf)
            if parent.parent is not None and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.last_used, id(parent), parent))
        self.evicted_pages += len(freed)
        self.tree.drop_empty_roots()
        return freed

    def _drop_state(self, node: Node) -> None:
        if node.state is not None:
            assert node.state_lock == 0, f"{node}: a locked state cannot be dropped"
            self._free_slot(node.state)
            node.state = None
            self.tree.num_states -= 1
            self.evicted_checkpoints += 1

    def evict_checkpoints(self, num_slots: int) -> int:
        held = sorted((n for n in self.tree.nodes() if n.state is not None and n.state_lock == 0),
                      key=lambda n: n.last_used)
        for node in held[:num_slots]:
            self._drop_state(node)
        return min(num_slots, len(held))

    def flush(self) -> list[int]:
        freed = self.evict(self.tree.num_pages)
        self.evict_checkpoints(self.tree.num_states)
        return freed

    def num_evictable_pages(self) -> int:
        return self.tree.num_unlocked_pages

    # -- checkpoints --------------------------------------------------------------------------

    def plan_checkpoint(self, start: int, end: int, branch: int | None = None) -> CheckpointPlan | None:
        """A branch point the step passes (kept until insert), else the last multiple of
        ``track_interval`` it passes."""
        if not self.recurrent:
            return None
        if branch is not None and start < branch <= end:
            return CheckpointPlan(branch, keep=True)
        grid = self.context.track_interval
        last = end // grid * grid
        return CheckpointPlan(last) if last > start else None

    def stats(self) -> dict[str, int]:
        return {"tree_nodes": self.tree.num_nodes, "tree_pages": self.tree.num_pages,
                "tree_tokens": self.tree.num_pages * self.page_size,
                "tree_checkpoints": self.tree.num_states, "evicted_pages": self.evicted_pages,
                "evicted_checkpoints": self.evicted_checkpoints,
                "inserted_checkpoints": self.inserted_checkpoints}
