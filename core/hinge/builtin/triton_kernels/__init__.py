"""Triton kernels of the built-in ``triton`` attention backend.

``kernels(interpret)`` returns the kernel module compiled for the GPU, or (``interpret=True``) a
separate copy of it decorated under Triton's interpreter (``TRITON_INTERPRET=1``), which runs the
same kernels with numpy on CPU tensors. Each is loaded with the environment variable set for it,
so the compiled kernels stay compiled even in a process (a test session) that sets it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

_MODULE = "hinge.builtin.triton_kernels.paged_attention"
_INTERPRETED = _MODULE + "_interpreted"
_lock = threading.Lock()


def interpreter_requested() -> bool:
    """Whether ``TRITON_INTERPRET=1`` is set (how tests run the kernels on CPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@contextmanager
def _interpret_env(value: str) -> Iterator[None]:
    """``TRITON_INTERPRET=value`` while a kernel module executes (``@triton.jit`` reads it then)."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


def _numpy_index_shim() -> None:
    """Triton 3.6's interpreter turns a scalar into an index with ``int(array)``, which numpy
    >= 2.4 refuses for its 1-element arrays (triton-lang/triton#9171): every loop with a runtime
    bound fails. Apply upstream's fix (``int(array.squeeze())``) while the interpreter patches
    ``tl.tensor`` for a launch; compiled kernels never see it."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "hinge_numpy_index_shim", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched.hinge_numpy_index_shim = True
    interpreter._patch_lang_tensor = patched


def kernels(interpret: bool) -> ModuleType:
    """The paged-attention kernel module, compiled (``interpret=False``) or interpreted."""
    if not interpret:
        if _MODULE not in sys.modules:
            with _lock, _interpret_env("0"):  # compiled, whatever TRITON_INTERPRET says
                importlib.import_module(_MODULE)
        return sys.modules[_MODULE]
    with _lock:
        _numpy_index_shim()  # each time: a test's monkeypatch of the interpreter may have undone it
        if _INTERPRETED in sys.modules:
            return sys.modules[_INTERPRETED]
        spec = importlib.util.find_spec(_MODULE)
        assert spec is not None and spec.origin, f"cannot find {_MODULE}"
        copy = importlib.util.spec_from_file_location(_INTERPRETED, spec.origin)
        module = importlib.util.module_from_spec(copy)
        with _interpret_env("1"):
            copy.loader.exec_module(module)
        sys.modules[_INTERPRETED] = module
        return module
