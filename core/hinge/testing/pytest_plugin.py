"""pytest plugin (``pytest11`` entry point ``hinge``): the kit's fixtures and the ``gpu`` marker.

Inert until used: it defines fixtures and a marker only, and imports torch or hinge's internals
inside the fixtures that need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped without it")


@dataclass(frozen=True)
class TinyModelConfig:
    """Numbers of a tiny dense model (GQA); ``hf_config()`` gives transformers' Qwen3Config."""

    vocab_size: int = 128
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    max_position_embeddings: int = 256

    def hf_config(self) -> Any:
        from transformers import Qwen3Config

        return Qwen3Config(**vars(self), tie_word_embeddings=False, torch_dtype="float32")

    def attention_layer(self, kv_layer_id: int = 0, sliding_window: int | None = None) -> Any:
        from hinge.contracts import AttentionLayer

        return AttentionLayer(kv_layer_id, self.num_attention_heads, self.num_key_value_heads,
                              self.head_dim, self.head_dim ** -0.5, sliding_window)


@pytest.fixture
def plugin_manager():
    """An isolated plugin manager: core hookspecs and the built-ins, no installed plugins."""
    from hinge.plugins.manager import get_plugin_manager

    return get_plugin_manager(entry_points=[])


@pytest.fixture
def tiny_model_config() -> TinyModelConfig:
    return TinyModelConfig()


@pytest.fixture
def make_batch():
    """``make_batch(prefix_lens, extend_lens, **kw) -> BatchCase`` (batch, kv, layer, q, k, v);
    see ``hinge.testing.batches.build_batch``."""
    from hinge.testing.batches import build_batch

    return build_batch


@pytest.fixture
def reference_attention():
    """float64 per-request causal softmax attention over the paged cache."""
    from hinge.testing.reference import reference_attention as ref

    return ref


@pytest.fixture
def reference_linear():
    from hinge.testing.reference import reference_linear as ref

    return ref
