"""Fast (not batch-invariant) Triton kernels for small-batch decode on CUDA, default mode only.

``enabled(x, deterministic, invariant=...)`` is the one switch the layers ask: true only for a
CUDA tensor, with Triton importable, unless ``HINGE_FAST_KERNELS=0``, and in deterministic mode
only for kernels whose result for a row is that row's own program's (``invariant``). CPU paths
never reach these kernels, so their bits stay what the torch formulas give.
``gemv_enabled`` also wants ``HINGE_FAST_GEMV=1``: on the H200 (2026-12-01,
docs/benchmarks.md) the GEMV's default tilings ran at 0.58-0.96x of cuBLAS on the Qwen3-8B
linears, so cuBLAS stays the default until a tuned tiling beats it.

Kernels (one per module; each module's docstring states its contract):

- ``gemv``: ``y = x @ W.T`` for at most ``MAX_ROWS`` rows, streaming ``W`` (split-K with an
  ordered second pass, no atomics);
- ``add_rmsnorm``: residual add + RMSNorm in one pass;
- ``silu_mul``: ``silu(gate) * up`` of a fused ``[gate | up]`` with one rounding;
- ``qk_norm_rope``: per-head RMSNorm of q and k and the rotary embedding in one pass;
- ``gdn_gating``: the gated DeltaNet's decay and write gates (``g``, ``beta``) in one pass;
- ``gated_rmsnorm``: the gated DeltaNet's output norm times ``silu(z)`` in one pass;
- ``kv_write``: a step's keys and values into their KV-pool slots in one launch (a copy: also
  taken in deterministic mode, through ``hinge.layers.kv_write``).

The kernel modules import Triton at import time; import them through ``kernels()`` (only after
``enabled`` said yes).
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace

import torch

ENV = "HINGE_FAST_KERNELS"
GEMV_ENV = "HINGE_FAST_GEMV"


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 (a broken install is "not available", not a crash)
        return False
    return True


def enabled(x: torch.Tensor, deterministic: bool = False, *, invariant: bool = False) -> bool:
    """Whether ``x``'s op may take a fast Triton kernel: CUDA, Triton present, ``HINGE_FAST_KERNELS``
    not ``0``, and outside deterministic mode unless the caller's kernel is ``invariant``.

    ``invariant``: a row's result is one program's arithmetic on that row alone (one program per
    row or per element, a tiling fixed by the model's sizes): ``add_rmsnorm``, ``qk_norm_rope``,
    ``gdn_gating``, ``gated_rmsnorm`` with one row a program, ``kv_write``. Deterministic mode
    may take those, since every row of every step (prefill, decode, any batch) then runs the same
    code; never the GEMV, whose tiling and split follow the number of rows."""
    return (x.is_cuda and (invariant or not deterministic) and os.environ.get(ENV, "1") != "0"
            and triton_available())


def gemv_enabled(x: torch.Tensor) -> bool:
    """Whether a linear may take the Triton GEMV: ``enabled(x)`` and ``HINGE_FAST_GEMV=1`` (off by
    default: slower than cuBLAS where measured)."""
    return enabled(x) and os.environ.get(GEMV_ENV, "0") == "1"


@functools.cache
def kernels() -> SimpleNamespace:
    """The kernel modules (``gemv``, ``add_rmsnorm``, ``silu_mul``, ``qk_norm_rope``,
    ``gdn_gating``, ``gated_rmsnorm``, ``kv_write``), imported on first use."""
    from hinge.layers.fast_triton import (
        add_rmsnorm,
        gated_rmsnorm,
        gdn_gating,
        gemv,
        kv_write,
        qk_norm_rope,
        silu_mul,
    )

    return SimpleNamespace(gemv=gemv, add_rmsnorm=add_rmsnorm, silu_mul=silu_mul,
                           qk_norm_rope=qk_norm_rope, gdn_gating=gdn_gating,
                           gated_rmsnorm=gated_rmsnorm, kv_write=kv_write)
