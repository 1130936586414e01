"""hinge_nvfp4's Triton modules under Triton's CPU interpreter, through the kit's helper
(``hinge.testing.triton_interpreter``: compiled kernels elsewhere stay compiled)."""

from __future__ import annotations

from pathlib import Path

import hinge_nvfp4
from hinge.testing.triton_interpreter import load_interpreted as _load
from hinge.testing.triton_interpreter import patch_interpreter

__all__ = ["load_interpreted", "patch_interpreter"]


def load_interpreted(name: str):
    """``hinge_nvfp4/<name>.py`` loaded afresh with its kernels interpreted."""
    return _load(Path(hinge_nvfp4.__file__).parent / f"{name}.py", f"_interpreted_hinge_nvfp4_{name}")
