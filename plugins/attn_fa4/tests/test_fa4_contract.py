"""The kit's contracts for fa4: packaging (entry point ``fa4`` of hinge-llm, nothing heavy
imported at load), and the attention contract on CPU through the torch emulation of
flash_attn_varlen_func, so everything but the CUDA kernel itself (metadata, int32 tables, the
page view, causal alignment, windows, softcap, split decode and its merge, the graph protocol)
is checked here; test_fa4_gpu.py runs the same contract on the real kernel."""

from __future__ import annotations

import pytest
import torch
from fa4_helpers import reference_spec

from hinge.testing import AttentionBackendContract, PluginPackagingContract
from hinge_fa4.plugin import FA4_SPEC


class TestPackaging(PluginPackagingContract):
    plugin_name, distribution = "fa4", "hinge-llm"


class TestFA4(AttentionBackendContract):
    """The registered spec: on CPU only its availability check runs (every other test needs
    cuda); on a GPU with flash-attn-4 every claim runs on the real kernel (bf16, 128-token
    pages, head dim 64; graph captures marked gpu)."""

    @pytest.fixture
    def spec(self):
        return FA4_SPEC

    @pytest.fixture(autouse=True)
    def _kernel_here(self, spec):
        from hinge.plugins.availability import probe_machine, unavailable_reason

        if torch.cuda.is_available():
            reason = unavailable_reason(spec, probe_machine("cuda"))
            if reason:
                pytest.skip(f"fa4 cannot run on this GPU machine: {reason}")


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
