"""hinge: a plugin-architected LLM inference engine.

``from hinge import LLM, SamplingParams, hookimpl``. ``LLM`` and ``SamplingParams`` load lazily,
so importing hinge (for example from a plugin module) does not import torch or the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hinge.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from hinge.llm import LLM
    from hinge.sampling_params import SamplingParams

__version__ = "0.1.0"
#: The distribution name on the package index (``hinge`` there is an unrelated project).
DISTRIBUTION = "hinge-llm"


def default_model_path() -> Path:
    """Directory of the checkpoint shipped inside the package (config.json, weights, tokenizer)."""
    path = Path(__file__).parent / "builtin" / "default_model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"the embedded default model is missing: no config.json in {path}; reinstall hinge "
            "or pass a model directory (--model PATH / LLM(model=PATH))"
        )
    return path
__all__ = ["LLM", "SamplingParams", "default_model_path", "hookimpl"]

_LAZY = {"LLM": "hinge.llm", "SamplingParams": "hinge.sampling_params"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hinge' has no attribute {name!r}")
