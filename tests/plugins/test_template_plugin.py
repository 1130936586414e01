"""examples/plugin-template as an outside author ships it: installed into this environment with
pip, discovered through its entry point, selected by name through config, its own contract tests
run by pytest."""

from __future__ import annotations

import importlib.metadata as md
import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from hinge.config import load_config
from hinge.plugins.plan import resolve_plan
from hinge.plugins_cli import cmd_plugins

TEMPLATE = Path(__file__).parents[2] / "examples" / "plugin-template"
DIST = "hinge-plugin-template"


def _installed() -> bool:
    try:
        md.distribution(DIST)
        return True
    except md.PackageNotFoundError:
        return False


def _pip(*args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    assert out.returncode == 0, f"pip {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"


@pytest.fixture(scope="module")
def template_installed():
    """Install the template (editable, no deps) unless it already is; uninstall what we installed."""
    was_installed = _installed()
    if not was_installed:
        _pip("install", "-q", "--no-deps", "--no-build-isolation", "-e", str(TEMPLATE))
        _activate_new_pth_files()
    try:
        yield
    finally:
        if not was_installed:
            _pip("uninstall", "-q", "-y", DIST)
            sys.modules.pop("hinge_template.plugin", None)
            sys.modules.pop("hinge_template", None)


def _activate_new_pth_files() -> None:
    """This process started before the install: run the distribution's .pth (its import hook),
    as the interpreter does at start-up for a fresh process."""
    dist = md.distribution(DIST)
    for f in dist.files or []:
        if str(f).endswith(".pth"):
            path = Path(dist.locate_file(f))
            site.addpackage(str(path.parent), path.name, None)


def test_hinge_plugins_lists_the_installed_template_ok(template_installed):
    # the allow-list keeps other installed plugins (a developer's, fixture builds) out of this test
    listing = json.loads(cmd_plugins(json=True, config=load_config(env={"HINGE_PLUGINS": "template"})))
    record = next(p for p in listing if p["name"] == "template")
    assert record["status"] == "ok", record["error"]
    assert (record["distribution"], record["version"]) == (DIST, "0.1.0")
    assert [c["name"] for c in record["components"]] == ["template-sdpa"]
    assert record["components"][0]["options"] == ["upcast"]


def test_config_selects_the_template_backend_by_name(template_installed):
    config = load_config(env={"HINGE_PLUGINS": "template"},  # only the template: no radix cache
                         overrides={"attention": "template-sdpa", "attention_options": {"upcast": True},
                                    "cache": "none"})
    plan = resolve_plan(config, model_info={})
    assert (plan.attention.plugin, plan.attention.distribution) == ("template", DIST)
    assert plan.build_attention(plan.build_context()).options.upcast is True
    assert "template-sdpa" in plan.describe()[1]


def test_the_templates_own_contract_tests_pass(template_installed):
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:schemathesis", str(TEMPLATE)],
                         capture_output=True, text=True, cwd=TEMPLATE, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
