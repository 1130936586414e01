"""Run Triton kernels under Triton's CPU interpreter in tests (``TRITON_INTERPRET=1``).

``triton.jit`` decides at decoration time whether a kernel is compiled for the GPU or interpreted
with numpy, so ``load_interpreted`` imports a private copy of a kernel module with the variable
set for that import only: the regular module (and any GPU test in the same session) keeps its
compiled kernels. ``patch_interpreter`` fixes what Triton 3.6's interpreter gets wrong for
hinge's kernels, for the duration of a test (``monkeypatch``):

- a compiled ``@triton.jit`` library function (``tl.sum``, ``tl.cdiv``) called from an
  interpreted kernel runs interpreted, and its patches of ``triton.language`` are undone after
  the call (left in place they break kernels compiled later in the session);
- numpy >= 2.4 refuses ``int()`` of the interpreter's 1-element scalars, which breaks
  ``range(0, n)`` over a runtime ``n`` (triton-lang/triton#9171);
- bfloat16 blocks are stored as their uint16 bits, and ``tl.dot`` would multiply the integers;
- ``tl.dot`` is numpy's float32 ``matmul``, whose row sums depend on the block's shape and the
  host's BLAS kernels: float dots are summed in float64 instead
  (``hinge.builtin.triton_kernels.exact_float_dot``), so a row's bits do not depend on its place.

For plugin authors too: ``load_interpreted(path_of_your_kernel_module)`` inside a test that calls
``patch_interpreter(monkeypatch)``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest


def patch_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply the interpreter fixes above until ``monkeypatch`` undoes them."""
    pytest.importorskip("triton", reason="Triton's interpreter needs the triton package")
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    def device_call(self, *args, **kwargs):
        # what InterpretedFunction.__call__ does, with its language patches undone afterwards
        scope = interp._patch_lang(self.fn)
        try:
            return interp.InterpretedFunction(self.fn).rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    patch_tensor = interp._patch_lang_tensor

    def patch_tensor_numpy2(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    from hinge.builtin.triton_kernels import exact_float_dot

    create_dot = interp.InterpreterBuilder.create_dot
    if not getattr(create_dot, "hinge_exact_dot", False):
        create_dot = exact_float_dot(create_dot)

    def create_dot_bf16(self, a, b, d, input_precision, max_num_imprecise_acc):
        a, b = (interp.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
                if x.dtype == tl.bfloat16 else x for x in (a, b))
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interp.InterpreterBuilder, "create_dot", create_dot_bf16)
    monkeypatch.setattr(JITFunction, "__call__", device_call)
    monkeypatch.setattr(interp, "_patch_lang_tensor", patch_tensor_numpy2)


def load_interpreted(path: str | Path, module_name: str | None = None) -> ModuleType:
    """The Python file ``path`` imported afresh (as ``module_name``) with its kernels interpreted."""
    pytest.importorskip("triton", reason="Triton's interpreter needs the triton package")
    path = Path(path)
    name = module_name or "_interpreted_" + "_".join(path.with_suffix("").parts[-3:])
    old = os.environ.get("TRITON_INTERPRET")
    before = set(sys.modules)
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
        _forget_interpreted_imports(set(sys.modules) - before - {name})
    return module


def _forget_interpreted_imports(names: set[str]) -> None:
    """Modules the private copy imported for the first time were decorated under the interpreter
    too: the copy keeps them, but ``sys.modules`` (and their package) forget them, so a regular
    import later compiles its kernels (a kernel module first imported here stayed interpreted for
    the rest of the session, and a compile of it failed in whichever test came next)."""
    from triton.runtime.interpreter import InterpretedFunction

    for mod_name in names:
        mod = sys.modules.get(mod_name)
        if mod is None or not any(isinstance(v, InterpretedFunction) for v in vars(mod).values()):
            continue
        del sys.modules[mod_name]
        parent, _, leaf = mod_name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], leaf, None) is mod:
            delattr(sys.modules[parent], leaf)
