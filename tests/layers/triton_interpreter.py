"""Load a copy of one of hinge's Triton kernel modules under Triton's CPU interpreter.

``triton.jit`` decides at decoration time whether a kernel is compiled for the GPU or interpreted
with numpy (``TRITON_INTERPRET=1``), so the copy is loaded from the file under a private module
name with the variable set for the duration of the import only: the regular modules (and any
GPU test in the same session) keep their compiled kernels. Triton's own library functions
(``tl.sum``, ``tl.cdiv``) were decorated when triton was first imported, compiled; the fixture
``interpreter`` lets interpreted kernels call them as interpreted device functions.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

import hinge


@pytest.fixture
def interpreter(monkeypatch):
    """While a test runs, a compiled ``@triton.jit`` library function called from an interpreted
    kernel runs interpreted (outside a kernel, compiled functions cannot be called anyway)."""
    patch_interpreter(monkeypatch)


def patch_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patches of the ``interpreter`` fixture, undone by ``monkeypatch``."""
    pytest.importorskip("triton", reason="Triton's interpreter needs the triton package")
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    def device_call(self, *args, **kwargs):
        # NOTE: what InterpretedFunction.__call__ does, but its patches of triton.language are
        # undone afterwards (left in place, they break kernels compiled later in the session)
        scope = interp._patch_lang(self.fn)
        try:
            return interp.InterpretedFunction(self.fn).rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    patch_tensor = interp._patch_lang_tensor

    def patch_tensor_numpy2(tensor, scope):
        # NOTE: the interpreter's scalars are 1-element arrays; numpy >= 2.4 refuses int() of
        # them, which breaks ``range(0, n)`` over a runtime ``n``; take the element instead
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    create_dot = interp.InterpreterBuilder.create_dot

    def create_dot_bf16(self, a, b, d, input_precision, max_num_imprecise_acc):
        # NOTE: bfloat16 blocks are stored as their uint16 bits and the interpreter would multiply
        # the integers; widen them to the float32 values they stand for
        a, b = (interp.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
                if x.dtype == tl.bfloat16 else x for x in (a, b))
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interp.InterpreterBuilder, "create_dot", create_dot_bf16)
    monkeypatch.setattr(JITFunction, "__call__", device_call)
    monkeypatch.setattr(interp, "_patch_lang_tensor", patch_tensor_numpy2)


def load_interpreted(relative_path: str) -> ModuleType:
    """``relative_path`` under the ``hinge`` package, e.g. ``layers/batch_invariant_triton/matmul.py``."""
    pytest.importorskip("triton", reason="Triton's interpreter needs the triton package")
    path = Path(hinge.__file__).parent / relative_path
    name = "_interpreted_" + relative_path.replace("/", "_").removesuffix(".py")
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while it runs
        spec.loader.exec_module(module)
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old
    return module
