"""Cache policy ``none``: no prefix sharing; every request's pages go back to the pool."""

from __future__ import annotations

from typing import Any

from hinge.contracts import CacheHit, CachePolicy
from hinge.plugins.capabilities import CacheCapabilities


class NoCachePolicy(CachePolicy):
    """Never matches, keeps nothing: ``insert`` hands every page back for the caller to free."""

    capabilities = CacheCapabilities(
        batch_invariant=True, prefill_graph=True, decode_graph=True, draft_graph=True)

    def __init__(self, options: Any = None, build: Any = None):
        self.options = options
        self.build = build

    def match(self, tokens: list[int], *, salt: str | None = None) -> CacheHit:
        return CacheHit()

    def lock(self, hit: CacheHit) -> None:
        pass

    def unlock(self, hit: CacheHit) -> None:
        pass

    def insert(self, tokens: list[int], pages: list[int], checkpoints: Any = None, *,
               salt: str | None = None) -> list[int]:
        slots = self.context.checkpoint_slots if self.context is not None else None
        for slot in (checkpoints or {}).values():  # offered states are freed, as pages are returned
            if slots is not None:
                slots.free(slot)
        return list(pages)

    def evict(self, num_pages: int) -> list[int]:
        return []

    def flush(self) -> list[int]:
        return []
