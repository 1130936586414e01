"""A model directory without weights for ``--random-weights`` / ``--model-config``.

The directory holds the configuration's ``config.json`` and the embedded model's tokenizer files
(the engine needs a tokenizer; its 8,192 tokens are fewer than a real vocabulary, which is why
random-weight runs send random ids and never detokenize). The engine builds it with
``load_format="dummy"``: seeded random weights, no checkpoint.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from hinge.bench.presets import DEFAULT_SIZES, preset_config

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def wants_random_weights(args: argparse.Namespace) -> bool:
    """True when the run builds its model from a preset or a config.json, without weights."""
    return bool(getattr(args, "random_weights", False) or getattr(args, "model_config", None))


def random_model_config(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The ``config.json`` dict the flags ask for and a label: ``--model-config FILE`` or the
    ``--arch``/``--size`` preset."""
    if args.model_config:
        return read_model_config(args.model_config), f"config {args.model_config}"
    arch = args.arch or "qwen3"
    size = args.size or DEFAULT_SIZES.get(arch, "")
    return preset_config(arch, size), f"{arch} {size} preset"


def read_model_config(path: str | Path) -> dict[str, Any]:
    """``path`` as a dict; errors name the file and say what is wrong."""
    from hinge.models.registry import resolve_architecture

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--model-config {path} does not exist; pass a config.json file")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"--model-config {path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"--model-config {path} must hold one JSON object (a config.json)")
    resolve_architecture(config.get("architectures"), file)  # a clear error for unknown ones
    return config


def write_random_model(directory: str | Path, config: dict[str, Any]) -> Path:
    """Write ``config.json`` and the embedded tokenizer's files into ``directory``."""
    from hinge import default_model_path

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for name in TOKENIZER_FILES:
        shutil.copy(default_model_path() / name, out / name)
    return out


def vocab_size(config: dict[str, Any]) -> int:
    """The model's vocabulary (top level, or a composite config's ``text_config``)."""
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(size, int) or size < 1:
        raise ValueError("the model configuration has no vocab_size; add it to config.json")
    return size
