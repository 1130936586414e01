"""Load a copy of one of hinge_nvfp4's Triton modules under Triton's CPU interpreter
(``TRITON_INTERPRET=1`` for the import only, so compiled kernels elsewhere stay compiled), with
the two interpreter fixes hinge's own kernel tests apply (tests/layers/triton_interpreter.py):
numpy >= 2.4 scalars as loop bounds, and bfloat16 blocks in ``tl.dot``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

import hinge_nvfp4


def patch_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton", reason="Triton's interpreter needs the triton package")
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    def device_call(self, *args, **kwargs):
        scope = interp._patch_lang(self.fn)
        try:
            return interp.InterpretedFunction(self.fn).rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    patch_tensor = interp._patch_lang_tensor

    def patch_tensor_numpy2(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    create_dot = interp.InterpreterBuilder.create_dot

    def create_dot_bf16(self, a, b, d, input_precision, max_num_imprecise_acc):
        a, b = (interp.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
                if x.dtype == tl.bfloat16 else x for x in (a, b))
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interp.InterpreterBuilder, "create_dot", create_dot_bf16)
    monkeypatch.setattr(JITFunction, "__call__", device_call)
    monkeypatch.setattr(interp, "_patch_lang_tensor", patch_tensor_numpy2)


def load_interpreted(name: str):
    """``hinge_nvfp4/<name>.py`` loaded afresh with its kernels interpreted."""
    pytest.importorskip("triton", reason="Triton's interpreter needs the triton package")
    path = Path(hinge_nvfp4.__file__).parent / f"{name}.py"
    module_name = f"_interpreted_hinge_nvfp4_{name}"
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old
    return module
