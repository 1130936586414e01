"""flash-attn-4's sm_90 forward launched early: programmatic dependent launch (PDL) for the
pinned flash-attn-4's ``FlashAttentionForwardSm90``, which has none (on an H100: a batch-1 split
decode layer 11.5 -> 9.8 us at 4096 keys; docs/benchmarks.md, twenty-eighth session).

flash-attn-4 launches ``FlashAttentionForwardSm90`` plainly: in a decode graph each layer's call
waits for the kernel before it to end and flush, then for its own launch and prologue (about
1.3 us a node boundary on the H200: docs/benchmarks.md, twenty-seventh session). ``EarlyForwardSm90``
is that class with three changes and nothing else:

- its launch carries the programmatic-stream-serialization attribute (``use_pdl``), so its
  blocks may start while the kernel before it drains (hinge's merge, rope and GEMV kernels let
  their dependents launch early: ``hinge.devices.early_dependents``);
- its producer warpgroup (``load``) and its MMA warpgroups (``mma``) execute
  ``griddepcontrol.wait`` before anything else they do: no global read (queries, the page
  table, ``seqused_k``, keys) and no write (outputs, lse) before the kernel before it has ended
  and flushed (the rule of ``early_dependents``). Before the wait the kernel only prefetches its
  TMA descriptors (kernel parameters), allocates shared memory and initialises its barriers;
- after the wait both let *their* dependents launch (``griddepcontrol.launch_dependents``): the
  split decode's merge, launched early itself, waits for this call's end before it reads a part.

``early_forward()`` puts the class (and a compile cache of its own, so that no kernel compiled
without the attribute is ever taken for one with it, in memory or on disk) where
``flash_attn.cute.interface._flash_attn_fwd`` looks them up, for the duration of one call.
NOTE: that swap is process-wide for the call's duration: a thread calling flash-attn-4's
forward directly at the same moment would compile or take the early kernel too (correct, as every
early kernel waits, but not what it asked for). hinge's own calls hold a lock around the swap, so
two of them never interleave (which could leave the early class in place after both).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

#: bumped whenever ``EarlyForwardSm90`` changes: names its compile cache (flash-attn's own on-disk
#: key covers flash_attn/cute's sources only, not this file)
EARLY_REVISION = 1

_SWAP = threading.Lock()  #: one swap at a time: each restores what it found


class _EarlyLaunch:
    """A CuTe DSL kernel launcher whose ``launch`` adds ``use_pdl=True``."""

    def __init__(self, launcher: Any) -> None:
        self._launcher = launcher

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        return self._launcher.launch(*args, **{**kwargs, "use_pdl": True})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._launcher, name)


@cache
def early_forward_class() -> type:
    """``FlashAttentionForwardSm90`` launched early (this module's docstring), built on first use
    (importing flash_attn.cute needs the CUDA toolchain of the gpu extra)."""
    import cutlass.cute as cute
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90 as base

    class EarlyForwardSm90(base):
        def kernel(self, *args: Any, **kwargs: Any) -> Any:
            return _EarlyLaunch(base.kernel(self, *args, **kwargs))

        def load(self, *args: Any, **kwargs: Any) -> Any:
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
            return base.load(self, *args, **kwargs)

        def mma(self, *args: Any, **kwargs: Any) -> Any:
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
            return base.mma(self, *args, **kwargs)

    EarlyForwardSm90.__qualname__ = EarlyForwardSm90.__name__ = "EarlyForwardSm90"
    return EarlyForwardSm90


@cache
def _early_cache() -> Any:
    from flash_attn.cute.cache_utils import get_jit_cache

    return get_jit_cache(f"fwd_hinge_early_{EARLY_REVISION}")


@cache
def _interface() -> Any:
    from flash_attn.cute import interface

    return interface


@contextmanager
def early_forward(interface: Any = None, early_class: Any = None,
                  compile_cache: Any = None) -> Iterator[None]:
    """flash-attn-4's forward calls inside the block compile and launch ``EarlyForwardSm90`` from
    their own compile cache; everything is put back on leaving, also on an error.
    (``interface``, ``early_class``, ``compile_cache``: tests pass stand-ins.)"""
    interface = interface or _interface()
    early_class = early_class or early_forward_class()
    compile_cache = compile_cache if compile_cache is not None else _early_cache()
    with _SWAP:
        fwd = interface._flash_attn_fwd
        saved = interface.FlashAttentionForwardSm90, fwd.compile_cache
        interface.FlashAttentionForwardSm90, fwd.compile_cache = early_class, compile_cache
        try:
            yield
        finally:
            interface.FlashAttentionForwardSm90, fwd.compile_cache = saved
