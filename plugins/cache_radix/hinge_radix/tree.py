"""A radix tree over token ids in whole KV pages, one root per cache salt.

Each node holds a span of tokens (a whole number of pages), the KV page ids of that span and,
for hybrid models, at most one recurrent-state checkpoint: the state after the node's last token
(``state``, a slot of the state pool's checkpoint region). A node whose KV is cached but whose
state is not is a tombstone for states (a hit cannot end there).

- ``lock`` counts the running requests whose hit covers the node (locks go from a hit's node to
  the root, so every ancestor of a locked node is locked); locked pages are never evicted.
- ``state_lock`` counts the requests resuming from the node's state; it is never evicted then.
- ``last_used`` is a logical clock; a path is touched root first, so a child is always more
  recent than its parent and eviction (unlocked leaves, oldest first) works from the leaves in.
- Splitting a node at a page boundary gives the new parent the first pages and the child's lock
  count; the state stays with the child (a state belongs to exactly one position: a node's end).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(eq=False)
class Node:
    key: tuple[int, ...]  #: this node's tokens (a whole number of pages)
    pages: list[int]  #: KV page ids of those tokens, one per page
    parent: Node | None
    depth: int  #: tokens from the root to this node's end
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)  #: by first page of tokens
    lock: int = 0
    state: int | None = None  #: checkpoint slot: the recurrent state after ``depth`` tokens
    state_lock: int = 0
    last_used: int = 0

    @property
    def start(self) -> int:
        return self.depth - len(self.key)

    def __repr__(self) -> str:
        return (f"Node({self.start}..{self.depth}, pages={self.pages}, lock={self.lock}, "
                f"state={self.state}, children={len(self.children)})")


@dataclass
class Walk:
    """How far ``tokens`` follow the tree: whole nodes, then part of one more."""

    path: list[Node]  #: fully matched nodes, root excluded, in order
    partial: Node | None = None  #: a node matched for ``partial_pages`` of its pages only
    partial_pages: int = 0

    def num_pages(self) -> int:
        return sum(len(n.pages) for n in self.path) + self.partial_pages

    def pages(self) -> list[int]:
        out = [p for n in self.path for p in n.pages]
        if self.partial is not None:
            out += self.partial.pages[:self.partial_pages]
        return out


class RadixTree:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.roots: dict[str | None, Node] = {}
        self.clock = itertools.count(1)
        self.num_pages = 0  #: pages held by the tree
        self.num_unlocked_pages = 0  #: of them, pages of unlocked nodes (evictable)
        self.num_nodes = 0
        self.num_states = 0

    # -- walking ----------------------------------------------------------------------------

    def root(self, salt: str | None, *, create: bool = False) -> Node | None:
        node = self.roots.get(salt)
        if node is None and create:
            node = self.roots[salt] = Node((), [], None, 0)
        return node

    def _page_key(self, tokens: list[int] | tuple[int, ...], page: int) -> tuple[int, ...]:
        ps = self.page_size
        return tuple(tokens[page * ps:(page + 1) * ps])

    def walk(self, tokens: list[int], salt: str | None) -> Walk:
        """Follow ``tokens`` (whole pages of them) from the salt's root."""
        walk = Walk([])
        node = self.root(salt)
        num_pages = len(tokens) // self.page_size
        at = 0
        while node is not None and at < num_pages:
            child = node.children.get(self._page_key(tokens, at))
            if child is None:
                break
            m = self._common_pages(child, tokens, at, num_pages)
            if m < len(child.pages):
                walk.partial, walk.partial_pages = child, m
                break
            walk.path.append(child)
            node, at = child, at + m
        return walk

    def _common_pages(self, node: Node, tokens: list[int], at: int, num_pages: int) -> int:
        ps, m = self.page_size, 0
        while m < len(node.pages) and at + m < num_pages and \
                node.key[m * ps:(m + 1) * ps] == tuple(tokens[(at + m) * ps:(at + m + 1) * ps]):
            m += 1
        return m

    def touch(self, nodes: list[Node]) -> None:
        """Mark ``nodes`` (a path, root side first) used now."""
        for node in nodes:
            node.last_used = next(self.clock)

    # -- changing -----------------------------------------------------------------------------

    def split(self, node: Node, num_pages: int) -> Node:
        """Cut ``node`` after its first ``num_pages`` pages; returns the new parent (first part)."""
        assert 0 < num_pages < len(node.pages), f"cannot split {node} at page {num_pages}"
        cut = num_pages * self.page_size
        parent = node.parent
        head = Node(node.key[:cut], node.pages[:num_pages], parent, node.start + cut,
                    lock=node.lock, last_used=node.last_used)
        parent.children[self._page_key(node.key, 0)] = head
        node.key, node.pages, node.parent = node.key[cut:], node.pages[num_pages:], head
        head.children[self._page_key(node.key, 0)] = node
        self.num_nodes += 1
        return head

    def add_leaf(self, parent: Node, tokens: tuple[int, ...], pages: list[int]) -> Node:
        leaf = Node(tokens, list(pages), parent, parent.depth + len(tokens))
        parent.children[self._page_key(tokens, 0)] = leaf
        self.num_nodes += 1
        self.num_pages += len(pages)
        self.num_unlocked_pages += len(pages)
        return leaf

    def remove_leaf(self, leaf: Node) -> None:
        assert not leaf.children and leaf.lock == 0 and leaf.state is None, f"cannot remove {leaf}"
        del leaf.parent.children[self._page_key(leaf.key, 0)]
        self.num_nodes -= 1
        self.num_pages -= len(leaf.pages)
        self.num_unlocked_pages -= len(leaf.pages)

    def node_ending_at(self, tokens: list[int], salt: str | None, position: int) -> Node | None:
        """The node whose span ends exactly at ``position`` on the path of ``tokens`` (split
        there if needed), or None when the tree does not hold that many of ``tokens``."""
        assert position % self.page_size == 0 and position > 0
        walk = self.walk(tokens[:position], salt)
        for node in walk.path:
            if node.depth == position:
                return node
        if walk.partial is not None and walk.partial.start + walk.partial_pages * self.page_size == position:
            return self.split(walk.partial, walk.partial_pages)
        return None

    # -- locks --------------------------------------------------------------------------------

    def lock(self, node: Node, delta: int) -> None:
        """Add ``delta`` (+1 / -1) to the lock of ``node`` and every ancestor."""
        while node is not None and node.parent is not None:
            before = node.lock
            node.lock += delta
            assert node.lock >= 0, f"{node} unlocked more often than locked"
            if before == 0 and node.lock > 0:
                self.num_unlocked_pages -= len(node.pages)
            elif before > 0 and node.lock == 0:
                self.num_unlocked_pages += len(node.pages)
            node = node.parent

    # -- iteration ----------------------------------------------------------------------------

    def nodes(self) -> Iterator[Node]:
        """Every node but the roots."""
        stack = [c for r in self.roots.values() for c in r.children.values()]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def evictable_leaves(self) -> list[tuple[int, int, Node]]:
        """A heap of (last_used, tie-break, node) over unlocked leaves."""
        heap = [(n.last_used, id(n), n) for n in self.nodes() if not n.children and n.lock == 0]
        heapq.heapify(heap)
        return heap

    def drop_empty_roots(self) -> None:
        for salt in [s for s, r in self.roots.items() if not r.children]:
            del self.roots[salt]
