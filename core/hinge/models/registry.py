"""HF ``architectures`` name -> model class, imported lazily ("module:Class").

Adding a family is one dict entry here (hybrid families add theirs the same way).
"""

from __future__ import annotations

import importlib
from pathlib import Path

MODEL_REGISTRY: dict[str, str] = {
    "LlamaForCausalLM": "hinge.models.llama:LlamaForCausalLM",
    "Qwen3ForCausalLM": "hinge.models.qwen3:Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM": "hinge.models.qwen3_moe:Qwen3MoeForCausalLM",
    "Qwen3_5ForCausalLM": "hinge.models.qwen3_5:Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration": "hinge.models.qwen3_5:Qwen3_5ForConditionalGeneration",
    "Qwen3NextForCausalLM": "hinge.models.qwen3_next:Qwen3NextForCausalLM",
    "Lfm2ForCausalLM": "hinge.models.lfm2:Lfm2ForCausalLM",
}


def supported_architectures() -> list[str]:
    return sorted(MODEL_REGISTRY)


def resolve_architecture(architectures: list[str] | None, config_file: Path | str = "config.json"):
    """The model class for the first supported name in ``architectures``."""
    for name in architectures or []:
        if name in MODEL_REGISTRY:
            module_name, _, attr = MODEL_REGISTRY[name].partition(":")
            return getattr(importlib.import_module(module_name), attr)
    raise ValueError(
        f"unsupported architecture {architectures or '(none given)'} in {config_file}; "
        f"hinge supports: {', '.join(supported_architectures())}. "
        "Check the config's `architectures` field, or add a model family to hinge.models.registry."
    )
