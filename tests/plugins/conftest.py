"""Fixtures for the plugin-system tests: fixture plugins on sys.path, a plugin-manager maker."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from plugin_fakes import FIXTURE_PLUGINS, FIXTURES, fixture_entry_point

from hinge.config import PluginSettings
from hinge.plugins.manager import get_plugin_manager


@pytest.fixture(autouse=True)
def fixture_plugin_paths(monkeypatch):
    for directory, _, _ in FIXTURE_PLUGINS.values():
        monkeypatch.syspath_prepend(str(FIXTURES / directory))
    yield
    for mod in [m for m in sys.modules if m.startswith("hinge_fixture_")]:
        del sys.modules[mod]


@pytest.fixture
def make_pm():
    """``make_pm(*entry_points_or_names, allow=None, block=(), strict=False)``."""

    def make(*eps: Any, allow: list[str] | None = None, block: tuple[str, ...] = (),
             strict: bool = False):
        entry_points = [fixture_entry_point(e) if isinstance(e, str) else e for e in eps]
        settings = PluginSettings(allow=allow, block=list(block), strict=strict)
        return get_plugin_manager(settings, entry_points=entry_points)

    return make
