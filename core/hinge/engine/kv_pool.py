"""Paged KV storage: one K and one V tensor per attention layer, addressed by flat slot.

Slot ``page * page_size + offset`` holds one token's keys/values for every layer. Page 0 is
reserved (a dummy page padded graph rows may point at), so usable pages are ``1..num_pages-1``.
``PageAllocator`` owns which of those pages are free; ``KVPool.create`` sizes the storage from a
byte budget (``kv_budget_bytes``). Models and attention backends see only the storage
(``hinge.forward.KVCache``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from hinge.forward import KVCache

if TYPE_CHECKING:
    from hinge.contracts import AttentionLayer

logger = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30
DEFAULT_CPU_KV_BYTES = 256 * MiB


class PageAllocator:
    """Pages ``1..num_pages-1`` (page 0 is reserved): freed pages are reused first (most recently
    freed first), then never-used pages in increasing order. Lazy, so a pool of millions of pages
    costs nothing until used."""

    def __init__(self, num_pages: int):
        assert num_pages >= 2, f"a KV pool needs at least 2 pages (one is reserved), got {num_pages}"
        self.num_pages = num_pages
        self._next = 1  # pages >= _next were never handed out
        self._free: list[int] = []
        self._used: set[int] = set()

    @property
    def num_usable(self) -> int:
        return self.num_pages - 1

    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_pages - self._next

    @property
    def num_used(self) -> int:
        return len(self._used)

    def can_allocate(self, n: int) -> bool:
        return n <= self.num_free

    def allocate(self, n: int) -> list[int]:
        assert self.can_allocate(n), f"asked for {n} pages, {self.num_free} free"
        reuse = min(n, len(self._free))
        pages = [self._free.pop() for _ in range(reuse)]
        fresh = n - reuse
        pages.extend(range(self._next, self._next + fresh))
        self._next += fresh
        self._used.update(pages)
        return pages

    def free(self, pages: list[int]) -> None:
        for page in pages:
            assert page in self._used, f"page {page} freed but not allocated (double free?)"
            self._used.remove(page)
            self._free.append(page)

    def reset(self) -> None:
        self.__init__(self.num_pages)


def kv_bytes_per_token(layers: list[AttentionLayer], dtype: torch.dtype) -> int:
    """K + V bytes one token takes across all attention layers."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return sum(2 * layer.num_kv_heads * layer.head_dim * itemsize for layer in layers)


def kv_budget_bytes(device: str, *, kv_cache_bytes: int | None, mem_fraction_static: float,
                    free_before_weights: int | None = None, activation_bytes: int = 0,
                    free_now: int | None = None, weight_bytes: int | None = None) -> int:
    """Bytes the KV pool (and the recurrent-state pool) may take.

    CPU: ``kv_cache_bytes`` (None: 256 MiB). CUDA: ``mem_fraction_static`` of the memory that was
    free before the weights loaded, minus what the weights took and minus ``activation_bytes``
    (the peak of a profiling forward at the largest step, ``hinge.engine.memory``), capped at
    ``kv_cache_bytes`` when that is set. What the fraction leaves over is headroom for CUDA
    graphs and the allocator. ``weight_bytes`` is what this process allocated for the weights
    (the engine passes torch's count); without it, the drop in free memory since
    ``free_before_weights``, which also counts other processes' allocations on the card
    (engines starting side by side once measured 117 GiB of weights for a tiny model).
    """
    if device != "cuda":
        return DEFAULT_CPU_KV_BYTES if kv_cache_bytes is None else int(kv_cache_bytes)
    if free_now is None:
        free_now = torch.cuda.mem_get_info()[0]
    before = free_now if free_before_weights is None else free_before_weights
    weights = before - free_now if weight_bytes is None else weight_bytes
    budget = int(mem_fraction_static * before) - weights - activation_bytes
    if kv_cache_bytes is not None:
        budget = min(budget, int(kv_cache_bytes))
    if budget <= 0:
        raise ValueError(
            f"no GPU memory left for the KV cache: mem_fraction_static={mem_fraction_static} of "
            f"{before / GiB:.2f} GiB free, minus {weights / GiB:.2f} GiB of weights and "
            f"{activation_bytes / GiB:.2f} GiB of activations at the largest step, is "
            f"{budget / GiB:.2f} GiB; raise mem_fraction_static, lower chunked_prefill_size, "
            "or use a smaller model")
    return budget


class KVPool(KVCache):
    """The engine's KV pool: the storage models see (``hinge.forward.KVCache``) plus the page
    allocator that decides which request owns which page."""

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], page_size: int) -> None:
        super().__init__(k, v, page_size)
        self.allocator = PageAllocator(self.num_pages)

    @classmethod
    def create(cls, layers: list[AttentionLayer], *, budget_bytes: int, page_size: int,
               dtype: torch.dtype, device: str | torch.device) -> KVPool:
        """Allocate as many pages as ``budget_bytes`` holds and log the size in tokens."""
        per_token = kv_bytes_per_token(layers, dtype)
        per_page = max(per_token, 1) * page_size
        num_pages = budget_bytes // per_page
        if num_pages < 2:
            raise ValueError(
                f"KV budget of {budget_bytes / MiB:.2f} MiB holds {num_pages} page(s) of "
                f"{page_size} tokens ({per_page} bytes each); at least 2 are needed: raise "
                f"kv_cache_bytes (CPU) or mem_fraction_static (CUDA)")
        slots = num_pages * page_size
        k = [torch.zeros(slots, layer.num_kv_heads, layer.head_dim, dtype=dtype, device=device)
             for layer in layers]
        v = [torch.zeros_like(t) for t in k]
        pool = cls(k, v, page_size)
        logger.info(
            "KV cache: %d tokens (%d pages of %d) for %d layers, %d bytes/token, K + V = %.2f MiB "
            "of a %.2f MiB budget, %s", pool.num_usable_tokens, num_pages - 1, page_size,
            len(layers), per_token, num_pages * per_page / MiB, budget_bytes / MiB, dtype)
        return pool
