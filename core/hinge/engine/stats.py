"""Engine counters: what ``Engine.stats()`` returns and ``/metrics`` exports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class EngineStats:
    kv_pages_total: int  #: usable pages (page 0 is reserved)
    kv_pages_used: int
    page_size: int
    num_running: int
    num_waiting: int
    num_retractions: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    prompt_tokens: int = 0  #: prompt tokens of finished requests
    generation_tokens: int = 0  #: output tokens produced
    cached_tokens: int = 0  #: prompt tokens served from the prefix cache
    #: pages only the prefix cache holds (evictable, so counted as free: not in kv_pages_used)
    kv_pages_cached: int = 0
    #: prefix cache: tokens queried and hit, the policy's own counters (tree size, checkpoints,
    #: evictions), checkpoint slots, checkpoint writes by path and phase (``engine.cache_stats``)
    prefix_cache: dict[str, Any] = field(default_factory=dict)
    forward_steps: int = 0
    #: steps run eagerly (no captured CUDA graph fits them), by batch phase (prefill, decode, mixed, verify)
    eager_steps: dict[str, int] = field(default_factory=dict)
    #: CUDA-graph replays by graph phase (prefill, decode, draft); /metrics exports them
    graph_replays: dict[str, int] = field(
        default_factory=lambda: {"prefill": 0, "decode": 0, "draft": 0})

    @property
    def kv_tokens_total(self) -> int:
        return self.kv_pages_total * self.page_size

    @property
    def kv_tokens_used(self) -> int:
        return self.kv_pages_used * self.page_size

    @property
    def kv_usage(self) -> float:
        return self.kv_pages_used / self.kv_pages_total if self.kv_pages_total else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(kv_tokens_total=self.kv_tokens_total, kv_tokens_used=self.kv_tokens_used,
                   kv_usage=self.kv_usage)
        return out


def server_info(engine: Any) -> dict[str, Any]:
    """``Engine.server_info()``: resolved config and plan, model, pools in tokens, versions."""
    import torch
    import transformers

    import hinge

    mcfg = engine.model.config
    states = engine.states
    return {
        "config": engine.config.model_dump(mode="json"),
        "plan": engine.plan.to_dict(),
        "model": {"path": str(engine.config.model), "architectures": mcfg.architectures,
                  "vocab_size": mcfg.vocab_size, "dtype": str(engine.dtype)},
        "max_model_len": engine.max_model_len,
        "kv_cache": {"tokens": engine.kv.num_usable_tokens,
                     "pages": engine.kv.allocator.num_usable, "page_size": engine.kv.page_size},
        "state_pool": None if states is None else {
            "slots": states.num_slots - 1, "slots_used": states.num_used, "bytes": states.nbytes,
            "checkpoint_slots": states.num_checkpoint_slots,
            "checkpoint_slots_used": states.checkpoints.num_used,
            "state_dtype": str(states.ssm_dtype)},
        "stats": engine.stats().to_dict(),
        "versions": {"hinge": getattr(hinge, "__version__", "unknown"),
                     "torch": torch.__version__, "transformers": transformers.__version__},
    }
