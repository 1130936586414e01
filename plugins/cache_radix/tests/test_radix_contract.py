"""The radix cache passes hinge's cache-policy contract (pages, salts, recurrent-state checkpoints)
and the packaging contract (entry point, no heavy imports, options refuse unknown keys)."""

from __future__ import annotations

import pytest

from hinge.testing import CachePolicyContract, PluginPackagingContract
from hinge_radix.plugin import RADIX_SPEC


class TestRadixPassesTheCacheContract(CachePolicyContract):
    @pytest.fixture
    def spec(self):
        return RADIX_SPEC


class TestRadixPageSize64(CachePolicyContract):
    @pytest.fixture
    def spec(self):
        return RADIX_SPEC

    @pytest.fixture
    def page_size(self):
        return 64


class TestRadixPackaging(PluginPackagingContract):
    plugin_name, distribution = "radix", "hinge-llm"
