"""hinge's own Triton kernel modules under Triton's CPU interpreter, through the kit's helper
(``hinge.testing.triton_interpreter``: it says what it patches and why)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

import hinge
from hinge.testing.triton_interpreter import load_interpreted as _load
from hinge.testing.triton_interpreter import patch_interpreter

__all__ = ["counting", "interpreter", "load_interpreted", "patch_interpreter"]


@pytest.fixture
def interpreter(monkeypatch):
    """While a test runs, the interpreter fixes of ``patch_interpreter`` hold."""
    patch_interpreter(monkeypatch)


def load_interpreted(relative_path: str) -> ModuleType:
    """``relative_path`` under the ``hinge`` package, e.g. ``layers/batch_invariant_triton/matmul.py``."""
    name = "_interpreted_" + relative_path.replace("/", "_").removesuffix(".py")
    return _load(Path(hinge.__file__).parent / relative_path, name)


def counting(module: ModuleType, name: str, calls: dict[str, int]) -> SimpleNamespace:
    """``module`` with its function ``name`` counting its calls in ``calls[name]`` (for a fake
    ``fast_triton.kernels()`` namespace: which kernels a model's layers reach, how often)."""
    fn = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)
    return SimpleNamespace(**{**vars(module), name: wrapper})
