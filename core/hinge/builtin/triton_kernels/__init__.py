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
from collections.abc import Callable, Iterator
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


def exact_float_dot(create_dot: Callable) -> Callable:
    """Triton's interpreter ``tl.dot`` (``InterpreterBuilder.create_dot``) with float operands
    summed in float64 (every product of float32 or float16 inputs exact) and rounded once to the
    accumulator's dtype; other operands go to ``create_dot``. The interpreter's own dot is numpy's
    float32 ``matmul``, whose BLAS kernels sum a row in an order that depends on the block's
    shape and the host CPU (OpenBLAS' AVX-512 kernels gave a row other bits at another place in
    its block, 2026-12-02): a kernel's row invariance, which holds for fixed tiles on the GPU,
    would pass or fail by machine under the interpreter."""
    import numpy as np
    from triton.runtime import interpreter

    floats = (np.float32, np.float16)

    def create(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.dtype in floats and b.data.dtype in floats:
            exact = np.matmul(a.data.astype(np.float64), b.data.astype(np.float64))
            return interpreter.TensorHandle(exact.astype(d.data.dtype) + d.data, d.dtype.scalar)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    create.hinge_exact_dot = True
    return create


def _exact_dot_shim() -> None:
    """``exact_float_dot`` on the interpreter while it runs this module's kernels."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if not getattr(builder.create_dot, "hinge_exact_dot", False):
        builder.create_dot = exact_float_dot(builder.create_dot)


def kernels(interpret: bool) -> ModuleType:
    """The paged-attention kernel module, compiled (``interpret=False``) or interpreted."""
    if not interpret:
        if _MODULE not in sys.modules:
            with _lock, _interpret_env("0"):  # compiled, whatever TRITON_INTERPRET says
                importlib.import_module(_MODULE)
        return sys.modules[_MODULE]
    with _lock:
        _numpy_index_shim()  # each time: a test's monkeypatch of the interpreter may have undone it
        _exact_dot_shim()
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
