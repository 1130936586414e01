"""Host lists to device tensors without waiting for the device.

``torch.tensor(values, device="cuda")`` copies from pageable memory, and torch then waits for
the copy, so it also waits for every kernel already queued on the stream: one such call while a
step runs stalls the host until the step ends, which undoes overlap scheduling. ``to_device``
stages through pinned memory (torch's caching host allocator, so no allocation per call) and
copies without blocking; on CPU it is ``torch.tensor``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch


def to_device(values: Sequence, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device``; never blocks on a CUDA device."""
    host = torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


@functools.cache
def num_sms(device: torch.device | str, fallback: int = 132) -> int:
    """Streaming multiprocessors of a CUDA ``device`` (what kernel tilings size their grids by);
    ``fallback`` anywhere else (the CPU interpreter tiles as for an H100/H200)."""
    device = torch.device(device)
    if device.type != "cuda":
        return fallback
    return torch.cuda.get_device_properties(device).multi_processor_count
