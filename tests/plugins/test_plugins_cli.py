"""What `hinge plugins` and `hinge plan` print (hinge.plugins_cli), with a fixture plugin."""

from __future__ import annotations

import json

import pytest
import torch  # noqa: F401 - `hinge plan` imports torch (the model's graph vote): not under faked entry points
from plugin_fakes import fixture_entry_point

from hinge.config import load_config
from hinge.plugins_cli import cmd_plan, cmd_plugins


@pytest.fixture
def installed(monkeypatch):
    import hinge.plugins.manager as manager

    eps = [fixture_entry_point("good"), fixture_entry_point("broken")]
    monkeypatch.setattr(manager.md, "entry_points", lambda group: eps)


def test_plugins_text_lists_status_distribution_error_and_components(installed):
    text = cmd_plugins(config=load_config(env={}))
    lines = text.splitlines()
    assert lines[0] == "hinge  [ok]  hinge-llm 0.1.0  (hinge.builtin.plugin)"
    assert "broken  [failed]  hinge-fixture-broken 0.1.0  (hinge_fixture_broken.plugin)" in lines
    assert any(line.startswith("    error: import failed: ModuleNotFoundError") for line in lines)
    good = next(line for line in lines if "good-attn" in line)
    assert "graphs prefill,decode,draft; options block_size, use_fast_path - fixture backend" in good


def test_plugins_json_is_the_listing(installed):
    listing = json.loads(cmd_plugins(json=True, config=load_config(env={})))
    assert [p["name"] for p in listing] == ["hinge", "broken", "good"]
    assert [p["status"] for p in listing] == ["ok", "failed", "ok"]


def test_plan_text_gives_each_selection_and_graph_reason(installed):
    config = load_config(env={}, overrides={"attention": "good-attn", "cache": "none",
                                            "attention_options": {"block_size": 32}})
    lines = cmd_plan(config).splitlines()
    assert lines[1] == ("attention: good-attn (plugin good, distribution hinge-fixture-good 0.1.0) "
                        "options {'block_size': 32, 'use_fast_path': True}")
    assert lines[-3].startswith("prefill graph: off, because cpu: CUDA graphs need device cuda; "
                                "model Qwen3_5ForCausalLM: 'linear_attention' layers build")
    assert json.loads(cmd_plan(config, json=True))["attention"]["options"]["block_size"] == 32


def test_plugins_text_marks_a_duplicate_name_as_a_conflict_under_both_owners(monkeypatch):
    import hinge.plugins.manager as manager

    eps = [fixture_entry_point("good"), fixture_entry_point("dup")]
    monkeypatch.setattr(manager.md, "entry_points", lambda group: eps)
    lines = cmd_plugins(config=load_config(env={})).splitlines()
    conflicts = [line.strip() for line in lines if "CONFLICT" in line]
    assert conflicts == [
        # plugins are listed by name: dup's line, then good's
        "CONFLICT: also registered by plugin 'good' (distribution hinge-fixture-good 0.1.0); "
        "selecting 'good-attn' fails until one of them is blocked or uninstalled",
        "CONFLICT: also registered by plugin 'dup' (distribution hinge-fixture-dup 0.1.0); "
        "selecting 'good-attn' fails until one of them is blocked or uninstalled",
    ]
    assert "dup  [ok]  hinge-fixture-dup 0.1.0  (hinge_fixture_dup.plugin)" in lines


def test_plugins_listing_shows_failures_even_with_strict_plugins(monkeypatch):
    import hinge.plugins.manager as manager

    eps = [fixture_entry_point("misspelled")]
    monkeypatch.setattr(manager.md, "entry_points", lambda group: eps)
    config = load_config(env={"HINGE_STRICT_PLUGINS": "1"})
    listing = {p["name"]: p for p in json.loads(cmd_plugins(json=True, config=config))}
    assert listing["misspelled"]["status"] == "failed"
    assert "did you mean 'register_attention_backends'?" in listing["misspelled"]["error"]
