"""hinge's plugin system: hookspecs, specs, capabilities, the manager and the resolved plan.

The public surface for plugin authors (re-exported here): ``hookimpl``, the spec classes,
the capability models, ``GraphVerdict`` and ``BuildContext``.
"""

from __future__ import annotations

from hinge.plugins.capabilities import (
    AttentionCapabilities,
    CacheCapabilities,
    Capabilities,
    GrammarCapabilities,
    GraphVerdict,
    QuantizerCapabilities,
    SpeculatorCapabilities,
)
from hinge.plugins.hookspecs import hookimpl, hookspec
from hinge.plugins.specs import (
    AttentionBackendSpec,
    BuildContext,
    CachePolicySpec,
    ComponentSpec,
    GrammarBackendSpec,
    OptionsError,
    QuantizerSpec,
    SpeculatorSpec,
)

#: (major, minor) of the hook and contract surface; a major bump breaks plugins
API_VERSION = (0, 1)

__all__ = [
    "API_VERSION",
    "AttentionBackendSpec",
    "AttentionCapabilities",
    "BuildContext",
    "CacheCapabilities",
    "CachePolicySpec",
    "Capabilities",
    "ComponentSpec",
    "GrammarBackendSpec",
    "GrammarCapabilities",
    "GraphVerdict",
    "OptionsError",
    "QuantizerCapabilities",
    "QuantizerSpec",
    "SpeculatorCapabilities",
    "SpeculatorSpec",
    "hookimpl",
    "hookspec",
]
