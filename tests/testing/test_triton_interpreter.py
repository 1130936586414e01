"""The kit's ``load_interpreted``: a private interpreted copy of a kernel module never leaves an
interpreted module behind for the regular imports that come later."""

from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("triton")


def test_a_kernel_module_first_imported_by_an_interpreted_copy_compiles_when_imported_later(
        tmp_path, monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from hinge.testing.triton_interpreter import load_interpreted

    pkg = tmp_path / "acme_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "inner.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def double(x_ptr):\n    tl.store(x_ptr, tl.load(x_ptr) * 2)\n")
    (pkg / "outer.py").write_text("from acme_kernels import inner\n\nKERNEL = inner.double\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("acme_kernels", "acme_kernels.inner"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    copy = load_interpreted(pkg / "outer.py", "_interpreted_acme_outer")
    assert isinstance(copy.KERNEL, InterpretedFunction)  # the copy's world is interpreted
    inner = importlib.import_module("acme_kernels.inner")
    assert isinstance(inner.double, JITFunction) and not isinstance(inner.double, InterpretedFunction)
    from acme_kernels import inner as again

    assert again is inner
