"""The distribution is `hinge-llm` (`hinge` on the package index is another project); the import
name and the command stay `hinge`, and everything that names the distribution agrees."""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from pathlib import Path

import hinge

ROOT = Path(__file__).parents[1]


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def test_distribution_is_named_hinge_llm_and_provides_the_hinge_package_and_command():
    project = _pyproject(ROOT / "pyproject.toml")
    assert project["name"] == hinge.DISTRIBUTION == "hinge-llm"
    assert project["scripts"] == {"hinge": "hinge.cli:main"}
    dist = md.distribution(hinge.DISTRIBUTION)
    assert dist.version == hinge.__version__


def test_plugin_template_depends_on_hinge_llm_not_the_unrelated_hinge():
    deps = _pyproject(ROOT / "examples" / "plugin-template" / "pyproject.toml")["dependencies"]
    assert "hinge-llm" in deps and "hinge" not in deps


def test_plugin_docs_tell_authors_to_depend_on_hinge_llm():
    text = (ROOT / "docs" / "plugins.md").read_text()
    assert 'dependencies = ["hinge-llm"]' in text


def test_the_builtin_plugin_is_attributed_to_the_hinge_llm_distribution():
    from hinge.plugins.manager import get_plugin_manager

    listing = get_plugin_manager(entry_points=[]).listing()
    assert (listing[0]["name"], listing[0]["distribution"]) == ("hinge", "hinge-llm")


def test_builtins_come_in_through_hinges_own_entry_point_and_a_missing_one_says_how_to_fix(monkeypatch):
    import pytest

    from hinge.plugins import manager

    ep = manager.builtin_entry_point()
    assert (ep.group, ep.name, ep.value) == ("hinge.plugins", "hinge", "hinge.builtin.plugin")

    def not_installed(name):
        raise manager.md.PackageNotFoundError(name)

    monkeypatch.setattr(manager.md, "distribution", not_installed)
    with pytest.raises(manager.PluginError, match=r"pip install -e \."):
        manager.get_plugin_manager(entry_points=[])
