"""Fake entry points for the fixture plugins under tests/fixtures/plugins (hermetic, in-process).

Each fixture plugin is also an installable distribution (its own pyproject.toml); here its
directory goes on sys.path and a fake entry point stands in for the installed one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parents[1] / "fixtures" / "plugins"
FIXTURE_PLUGINS = {
    # entry-point name: (fixture dir, distribution, module)
    "good": ("good", "hinge-fixture-good", "hinge_fixture_good.plugin"),
    "broken": ("broken_import", "hinge-fixture-broken", "hinge_fixture_broken.plugin"),
    "dup": ("dup_name", "hinge-fixture-dup", "hinge_fixture_dup.plugin"),
    "misspelled": ("misspelled_hook", "hinge-fixture-misspelled", "hinge_fixture_misspelled.plugin"),
}


@dataclass(frozen=True)
class FakeDist:
    name: str
    version: str = "0.1.0"


@dataclass(frozen=True)
class FakeEntryPoint:
    """Quacks like importlib.metadata.EntryPoint: name, value, dist, load()."""

    name: str
    value: str
    dist: FakeDist | None = None
    obj: Any = None  # returned by load() instead of importing ``value``
    group: str = "hinge.plugins"

    def load(self) -> Any:
        if self.obj is not None:
            return self.obj
        module, _, attr = self.value.partition(":")
        out = importlib.import_module(module)
        return getattr(out, attr) if attr else out


def fixture_entry_point(name: str) -> FakeEntryPoint:
    _, dist, module = FIXTURE_PLUGINS[name]
    return FakeEntryPoint(name, module, FakeDist(dist))


def in_process(name: str, obj: Any, dist: str | None = None) -> FakeEntryPoint:
    """An in-process plugin object (a class or instance with @hookimpl methods)."""
    return FakeEntryPoint(name, f"<in-process {name}>", FakeDist(dist) if dist else None, obj=obj)


def installed_env(site: Path, *names: str) -> dict[str, str]:
    """Environment for a ``hinge`` subprocess that sees the fixture plugins ``names`` as installed
    distributions: a ``.dist-info`` with the entry point in ``site``, and the sources on PYTHONPATH.
    """
    import os

    paths = [str(site)]
    for name in names:
        directory, dist, module = FIXTURE_PLUGINS[name]
        info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(f"[hinge.plugins]\n{name} = {module}\n")
        paths.append(str(FIXTURES / directory))
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(paths + ([old] if old else []))}
