"""The kit's contracts for fa4: packaging (entry point ``fa4`` of hinge-llm, nothing heavy
imported at load), and the attention contract on CPU through the torch emulation of
flash_attn_varlen_func, so everything but the CUDA kernel itself (metadata, int32 tables, the
page view, causal alignment, windows, softcap, split decode and its merge, the graph protocol)
is checked here; test_fa4_gpu.py runs the same contract on the real kernel."""

from __future__ import annotations

import pytest
from fa4_helpers import reference_spec

from hinge.testing import AttentionBackendContract, PluginPackagingContract


class TestPackaging(PluginPackagingContract):
    plugin_name, distribution = "fa4", "hinge-llm"


class TestFA4OnTheEmulatedKernel(AttentionBackendContract):
    @pytest.fixture
    def spec(self):
        return reference_spec()

    @pytest.fixture
    def options(self):
        return {"kernel": "reference", "split_kv": "never"}


class TestFA4SplitDecodeOnTheEmulatedKernel(AttentionBackendContract):
    """Every decode and verify step split into 16-key chunks (at most 2 per request, the rest in
    the tail): chunks, tails and the merge against the float64 oracle, eager and replayed."""

    @pytest.fixture
    def spec(self):
        return reference_spec(page_sizes=frozenset({16}))

    @pytest.fixture
    def options(self):
        return {"kernel": "reference", "split_kv": "always", "split_size": 16, "max_splits": 2}
