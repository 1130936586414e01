"""The real ``hinge`` CLI with fixture plugins installed (as .dist-info on PYTHONPATH): a broken
plugin is listed, never fatal until selected or under --strict-plugins; exit codes and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from plugin_fakes import installed_env

MISSPELLED = "plugin 'misspelled' (distribution hinge-fixture-misspelled 0.1.0)"
TYPO = ("hookimpl 'register_attention_backend' matches no hinge hook; "
        "did you mean 'register_attention_backends'?")


def hinge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    return subprocess.run([sys.executable, "-m", "hinge.cli", *args], capture_output=True,
                          text=True, env={**base, **env}, timeout=300)


class TestMisspelledHookPlugin:
    @pytest.fixture(scope="class")
    @classmethod
    def env(cls, tmp_path_factory):
        return installed_env(tmp_path_factory.mktemp("site"), "misspelled")

    def test_hinge_plugins_exits_0_and_lists_it_as_failed_with_the_did_you_mean(self, env):
        run = hinge("plugins", env=env)
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        assert "misspelled  [failed]  hinge-fixture-misspelled 0.1.0  (hinge_fixture_misspelled.plugin)" in lines
        assert f"    error: {TYPO}" in lines
        listing = {p["name"]: p for p in json.loads(hinge("plugins", "--json", env=env).stdout)}
        assert (listing["misspelled"]["status"], listing["misspelled"]["error"]) == ("failed", TYPO)
        assert listing["hinge"]["status"] == "ok"

    def test_other_commands_still_work(self, env):
        run = hinge("plan", "--json", env=env)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["attention"]["name"] == "torch"

    def test_selecting_its_component_exits_2_naming_why_the_plugin_failed(self, env):
        run = hinge("plan", "--attention", "never-registered", env=env)
        assert run.returncode == 2, run.stderr
        assert "\nhinge: error: unknown attention backend 'never-registered'" in "\n" + run.stderr
        assert f"not loaded, may provide it: {MISSPELLED}: failed: {TYPO}" in run.stderr
        assert "Traceback" not in run.stderr

    def test_strict_plugins_exits_2_naming_plugin_and_hook(self, env):
        run = hinge("plan", "--strict-plugins", env=env)
        assert run.returncode == 2, run.stderr
        assert f"hinge: error: {MISSPELLED}: {TYPO}" in run.stderr
        assert "strict plugins: any plugin failure is fatal" in run.stderr
        assert "Traceback" not in run.stderr


class TestDuplicateName:
    @pytest.fixture(scope="class")
    @classmethod
    def env(cls, tmp_path_factory):
        return installed_env(tmp_path_factory.mktemp("site"), "good", "dup")

    def test_hinge_plugins_exits_0_and_marks_the_name_under_both_owners(self, env):
        run = hinge("plugins", "--json", env=env)
        assert run.returncode == 0, run.stderr
        listing = {p["name"]: p for p in json.loads(run.stdout)}
        marks = {name: [c["conflicts_with"] for c in listing[name]["components"] if c["name"] == "good-attn"]
                 for name in ("good", "dup")}
        assert marks == {"good": [["plugin 'dup' (distribution hinge-fixture-dup 0.1.0)"]],
                         "dup": [["plugin 'good' (distribution hinge-fixture-good 0.1.0)"]]}

    def test_selecting_the_name_exits_2_naming_both_and_another_name_works(self, env):
        run = hinge("plan", "--attention", "good-attn", env=env)
        assert run.returncode == 2, run.stderr
        assert ("hinge: error: attention backend 'good-attn' registered twice: by plugin 'dup' "
                "(distribution hinge-fixture-dup 0.1.0) and by plugin 'good' (distribution "
                "hinge-fixture-good 0.1.0)") in run.stderr
        assert "Traceback" not in run.stderr
        assert hinge("plan", "--attention", "torch", env=env).returncode == 0
