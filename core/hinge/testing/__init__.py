"""The plugin-author kit: fixtures and contract test classes for hinge components.

A plugin's tests subclass the contract classes and provide a ``spec`` fixture (the component's
spec, as its plugin registers it) or a ``component`` fixture (a built instance)::

    from hinge.testing import AttentionBackendContract

    class TestMyBackend(AttentionBackendContract):
        @pytest.fixture
        def spec(self):
            return my_plugin.ATTENTION_SPEC

The fixtures (``plugin_manager``, ``tiny_model_config``, ``make_batch``, ``reference_attention``,
``reference_linear``) come from the ``hinge`` pytest plugin (``hinge.testing.pytest_plugin``,
registered through the ``pytest11`` entry point); it only defines fixtures and is inert until a
test asks for one. Names are imported lazily so ``import hinge.testing`` stays cheap.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "AttentionBackendContract": "hinge.testing.attention_contract",
    "QuantizerContract": "hinge.testing.quantizer_contract",
    "SpeculatorContract": "hinge.testing.speculator_contract",
    "CachePolicyContract": "hinge.testing.cache_contract",
    "GrammarBackendContract": "hinge.testing.grammar_contract",
    "PluginPackagingContract": "hinge.testing.packaging_contract",
    "BatchCase": "hinge.testing.batches",
    "build_batch": "hinge.testing.batches",
    "run_requests": "hinge.testing.engine_runs",
    "reference_attention": "hinge.testing.reference",
    "reference_linear": "hinge.testing.reference",
    "reference_moe": "hinge.testing.reference",
    "build_linear": "hinge.testing.quantized_layers",
    "load_linear": "hinge.testing.quantized_layers",
    "build_moe": "hinge.testing.quantized_layers",
    "load_moe": "hinge.testing.quantized_layers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'hinge.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
