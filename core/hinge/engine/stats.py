"""Engine counters: what ``Engine.stats()`` returns and ``/metrics`` exports."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
    forward_steps: int = 0

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
