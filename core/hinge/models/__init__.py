"""Model families on shared ``hinge.layers``; ``load_model`` builds one from a local HF directory."""

from __future__ import annotations

from hinge.models.base import CausalLM, ModelConfig
from hinge.models.loader import load_config, load_model
from hinge.models.registry import MODEL_REGISTRY, supported_architectures

__all__ = ["MODEL_REGISTRY", "CausalLM", "ModelConfig", "load_config", "load_model", "supported_architectures"]
