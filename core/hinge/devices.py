"""Host lists to device tensors without waiting for the device.

``torch.tensor(values, device="cuda")`` copies from pageable memory, and torch then waits for
the copy, so it also waits for every kernel already queued on the stream: one such call while a
step runs stalls the host until the step ends, which undoes overlap scheduling. ``to_device``
stages through pinned memory (torch's caching host allocator, so no allocation per call) and
copies without blocking; on CPU it is ``torch.tensor``. ``to_device_all`` sends several lists
in one pinned buffer and one copy: each ``to_device`` costs a pin, a copy launch and their host
time, and a sampled step's dozen of them were part of its ~0.3 ms of device idle at batch 64 on
the H200 (``tools/gpu/roofline.py --profile sampled``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import torch


def to_device(values: Sequence, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device``; never blocks on a CUDA device."""
    host = torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def to_device_all(lists: dict[str, tuple[Sequence, torch.dtype]],
                  device: torch.device | str) -> dict[str, torch.Tensor]:
    """``{name: to_device(values, dtype, device)}`` for ``lists`` ``{name: (values, dtype)}``, in
    ONE pinned staging buffer and one non-blocking copy on CUDA (each tensor a view of the
    copy, at an 8-byte-aligned offset); on CPU plain ``torch.tensor`` per list."""
    host = {name: torch.tensor(values, dtype=dtype) for name, (values, dtype) in lists.items()}
    if torch.device(device).type != "cuda" or not host:
        return host
    return staged(host, device, pin=True)


def staged(host: dict[str, torch.Tensor], device: torch.device | str,
           pin: bool) -> dict[str, torch.Tensor]:
    """The 1-D ``host`` tensors packed into one byte buffer (pinned when ``pin``), sent to
    ``device`` in one copy, and viewed back by name and dtype."""
    spans, total = {}, 0
    for name, t in host.items():
        nbytes = t.numel() * t.element_size()
        spans[name] = (total, nbytes)
        total += -(-nbytes // 8) * 8
    staging = torch.empty(max(total, 8), dtype=torch.uint8, pin_memory=pin)
    for name, t in host.items():
        start, nbytes = spans[name]
        staging[start:start + nbytes] = t.view(torch.uint8)
    sent = staging.to(device, non_blocking=pin)
    return {name: sent[start:start + nbytes].view(host[name].dtype)
            for name, (start, nbytes) in spans.items()}


@functools.cache
def num_sms(device: torch.device | str, fallback: int = 132) -> int:
    """Streaming multiprocessors of a CUDA ``device`` (what kernel tilings size their grids by);
    ``fallback`` anywhere else (the CPU interpreter tiles as for an H100/H200)."""
    device = torch.device(device)
    if device.type != "cuda":
        return fallback
    return torch.cuda.get_device_properties(device).multi_processor_count


PDL_ENV = "HINGE_PDL"  #: ``0``: no programmatic dependent launch (``early_dependents``); default on


def early_dependents(device: torch.device | str) -> bool:
    """Whether the core's fast kernels use Hopper's programmatic dependent launch: ``device`` is
    CUDA of compute capability >= 9.0 and ``$HINGE_PDL`` is not ``0``.

    Those before a layer's GEMMs (``add_rmsnorm``, ``silu_mul``) let their dependents launch
    early (``griddepcontrol.launch_dependents`` at their start); they and ``qk_norm_rope`` are
    themselves launched with the programmatic-stream-serialization attribute and execute
    ``griddepcontrol.wait`` before anything else, so they may start while the GEMM before them
    drains (a GEMM that triggers early, as ``kernel: mma``'s GEMVs do once their weights are
    read). The rule for any kernel launched with the attribute: ``griddepcontrol.wait`` before it
    reads anything an earlier kernel wrote or writes any memory (it may read what no kernel of
    the step writes, such as weights, before). A kernel launched without the attribute is not
    affected. On by default since the H200 measured it (docs/gpu-results.md, 2026-12-02: nvfp4
    ``kernel: mma`` decode 348.1 -> 356.5 tokens/s)."""
    return os.environ.get(PDL_ENV) != "0" and _compute_capability(torch.device(device)) >= (9, 0)


@functools.cache
def _compute_capability(device: torch.device) -> tuple[int, int]:
    if device.type != "cuda":
        return (0, 0)
    return torch.cuda.get_device_capability(device)
