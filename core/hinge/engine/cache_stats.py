"""The engine's side of the prefix cache: the context it is attached with, the checkpoint budget,
and the counters ``Engine.stats()`` reports (``EngineStats.prefix_cache``, exported by ``/metrics``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hinge.contracts import CacheContext

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.engine.kv_pool import KVPool
    from hinge.engine.state_pool import StatePool

logger = logging.getLogger(__name__)

#: ``checkpoint_slots = None``: at most this share of the KV+state budget holds checkpoints
AUTO_CHECKPOINT_FRACTION = 0.1
#: ... and at most this many checkpoint slots per running request
AUTO_CHECKPOINTS_PER_REQUEST = 2


def checkpoint_slot_count(config: EngineConfig, per_slot: int, budget: int, *,
                          recurrent_cache: bool) -> int:
    """Checkpoint slots of a hybrid model's state pool: ``config.checkpoint_slots``, or (None)
    ``min(2 x max_running_requests, 10% of the KV+state budget)``; 0 when the cache policy keeps
    no recurrent state."""
    if not recurrent_cache:
        return 0
    if config.checkpoint_slots is not None:
        return config.checkpoint_slots
    by_memory = int(budget * AUTO_CHECKPOINT_FRACTION) // max(per_slot, 1)
    return max(0, min(AUTO_CHECKPOINTS_PER_REQUEST * config.max_running_requests, by_memory))


def cache_context(config: EngineConfig, kv: KVPool, states: StatePool | None) -> CacheContext:
    """What the cache policy may use: the page allocator (read only), the checkpoint region."""
    slots = states.checkpoints if states is not None and states.num_checkpoint_slots else None
    if states is not None and slots is None:
        logger.info("prefix cache: no checkpoint slots, so a hybrid model's requests never hit")
    return CacheContext(page_size=config.page_size, pages=kv.allocator,
                        track_interval=config.track_interval if slots is not None else 0,
                        checkpoint_slots=slots)


def prefix_cache_stats(engine: Any) -> dict[str, Any]:
    """``EngineStats.prefix_cache``: the scheduler's hit/query tokens, the policy's counters, the
    checkpoint region and the checkpoint writes the receipts confirmed (by path, then phase)."""
    sched = engine.scheduler
    out: dict[str, Any] = {"query_tokens": sched.cache_query_tokens,
                           "hit_tokens": sched.cache_hit_tokens}
    out.update(engine.cache.stats())
    states = engine.states
    if states is not None:
        planner = sched.planner
        out.update(checkpoint_slots_total=states.checkpoints.num_total,
                   checkpoint_slots_used=states.checkpoints.num_used,
                   checkpoints_unwritten=planner.checkpoints_unwritten,
                   checkpoints_skipped=planner.checkpoints_skipped)
    out["checkpoint_writes"] = {path: dict(phases) for path, phases in engine.checkpoint_writes.items()}
    return out
