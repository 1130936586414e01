"""The built-in components pass the same contracts a third-party plugin's components do."""

from __future__ import annotations

import pytest

from hinge.builtin.plugin import NO_CACHE, NO_QUANTIZER, TORCH_ATTENTION
from hinge.testing import AttentionBackendContract, CachePolicyContract, QuantizerContract


class TestTorchAttentionBackend(AttentionBackendContract):
    @pytest.fixture
    def spec(self):
        return TORCH_ATTENTION


class TestNoQuantizer(QuantizerContract):
    @pytest.fixture
    def spec(self):
        return NO_QUANTIZER


class TestNoCachePolicy(CachePolicyContract):
    @pytest.fixture
    def spec(self):
        return NO_CACHE
