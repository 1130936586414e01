"""The start-up heap frozen out of the garbage collector's passes (``EngineConfig.gc_freeze``).

A full (generation-2) collection stops the process and walks every object the collector tracks.
Once an engine has started, the process holds hundreds of thousands of them that no collection
will ever free: torch's and transformers' modules, the model's layers, the engine's pools and
plans (404,267 for a tiny Qwen3 on CPU, 2026-12-07), and one full pass over them took 181 ms
there. A decode step that meets one stalls that long, which a server sees as an inter-token
latency spike and a benchmark as a run of its own (``tools/gpu/nvfp4_gemm.py``'s whole-generate
rate, one 128-token generate, ranged 277-352 tokens/s over runs whose median decode step held at
367-369, H100, docs/nvfp4.md "One row in its own form": 0.1 s more in the slow runs; that a
collection was the cause there is not measured). ``gc.freeze`` moves them to a permanent generation no
pass walks: the same full collection right after took 0.01 ms. vLLM freezes after start-up in
its engine core and workers (pull requests 14902, 24008, 27896, 44363), sglang after its server
warm-up (34999), TensorRT-LLM behind an option (13907).

``freeze`` runs once, after the warm-up requests (their garbage collected first). ``thaw`` runs
in ``Engine.close`` before its own collection, so a closed engine's reference cycles are freed;
it thaws every other engine's start-up heap in the process too (walked again from then on, as
without freezing). Objects created after start-up stay collectable as ever.
"""

from __future__ import annotations

import gc
import time
from typing import Any, NamedTuple


class Frozen(NamedTuple):
    """What ``freeze`` did: objects moved out of the collector's passes and what a full
    collection took just before and just after (ms)."""

    objects: int
    full_pass_ms: float
    after_ms: float


def enabled(config: Any) -> bool:
    """``gc_freeze``: ``on``, ``off``, or ``auto`` (on CUDA only: a CPU engine is a test's or a
    reference's, often one of many in a process, where the two collections would cost more
    than the pauses they save)."""
    return config.on_by_device("gc_freeze")


def _full_pass_ms() -> float:
    start = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - start) * 1e3


def freeze() -> Frozen:
    """Collect, then freeze every object the collector tracks (``gc.freeze``)."""
    before = _full_pass_ms()
    gc.freeze()
    return Frozen(gc.get_freeze_count(), before, _full_pass_ms())


def thaw() -> None:
    """Give the frozen objects back to the collector's oldest generation (``gc.unfreeze``)."""
    gc.unfreeze()
