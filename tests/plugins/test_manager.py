from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plugin_fakes import FakeDist, FakeEntryPoint, fixture_entry_point, in_process

from hinge import hookimpl
from hinge.config import PluginSettings, load_config
from hinge.plugins import AttentionBackendSpec, QuantizerSpec
from hinge.plugins.manager import PluginError, get_plugin_manager
from hinge.plugins.plan import PlanError, resolve_plan


def _record(pm, name):
    return next(p for p in pm.listing() if p["name"] == name)


def test_good_plugin_is_listed_ok_with_distribution_components_and_capabilities(make_pm):
    pm = make_pm("good")
    good = _record(pm, "good")
    assert good["status"] == "ok" and good["error"] is None
    assert (good["distribution"], good["version"]) == ("hinge-fixture-good", "0.1.0")
    assert good["hooks"] == ["register_attention_backends", "register_quantizers"]
    attn = next(c for c in good["components"] if c["name"] == "good-attn")
    assert attn["kind"] == "attention"
    assert attn["options"] == ["block_size", "use_fast_path"]
    assert attn["capabilities"]["page_sizes"] == [16, 64]
    assert attn["capabilities"]["decode_graph"] is True
    assert pm.get_component("attention", "good-attn").plugin == "good"
    json.dumps(pm.listing())  # what `hinge plugins --json` prints must serialise


def test_builtins_are_listed_first_as_plugin_hinge(make_pm):
    listing = make_pm("good").listing()
    assert listing[0]["name"] == "hinge" and listing[0]["distribution"] == "hinge-llm"
    names = {(c["kind"], c["name"]) for c in listing[0]["components"]}
    assert names == {("attention", "flashinfer"), ("attention", "torch"), ("attention", "triton"),
                     ("quantizer", "none"), ("cache", "none"), ("grammar", "xgrammar")}


def test_importing_a_plugin_does_not_import_its_component_module(make_pm):
    make_pm("good")
    assert "hinge_fixture_good.plugin" in sys.modules
    assert "hinge_fixture_good.backend" not in sys.modules


def test_broken_import_is_recorded_and_not_fatal_when_not_selected(make_pm):
    pm = make_pm("good", "broken")
    broken = _record(pm, "broken")
    assert broken["status"] == "failed"
    assert broken["distribution"] == "hinge-fixture-broken"
    assert "ModuleNotFoundError" in broken["error"] and "hinge_fixture_missing_kernel" in broken["error"]
    assert broken["components"] == []
    assert _record(pm, "good")["status"] == "ok"


def test_broken_import_is_fatal_with_strict_naming_plugin_distribution_and_error(make_pm):
    with pytest.raises(PluginError) as err:
        make_pm("good", "broken", strict=True)
    msg = str(err.value)
    assert "'broken'" in msg and "hinge-fixture-broken 0.1.0" in msg
    assert "No module named 'hinge_fixture_missing_kernel'" in msg


def test_selecting_a_component_a_failed_plugin_may_provide_names_plugin_distribution_and_error(make_pm):
    pm = make_pm("broken")
    with pytest.raises(PluginError) as err:
        pm.get_component("attention", "broken-attn")
    msg = str(err.value)
    assert "unknown attention backend 'broken-attn'; installed: flashinfer, torch, triton" in msg
    assert "plugin 'broken' (distribution hinge-fixture-broken 0.1.0)" in msg
    assert "hinge_fixture_missing_kernel" in msg


GOOD = "plugin 'good' (distribution hinge-fixture-good 0.1.0)"
DUP = "plugin 'dup' (distribution hinge-fixture-dup 0.1.0)"
MISSPELLED = "plugin 'misspelled' (distribution hinge-fixture-misspelled 0.1.0)"


def test_duplicate_names_load_and_both_records_list_the_name_as_a_conflict(make_pm):
    pm = make_pm("good", "dup")
    good, dup = _record(pm, "good"), _record(pm, "dup")
    assert good["status"] == dup["status"] == "ok"
    good_attn = next(c for c in good["components"] if c["name"] == "good-attn")
    [dup_attn] = dup["components"]
    assert dup_attn["name"] == "good-attn"
    assert good_attn["conflicts_with"] == [DUP]
    assert dup_attn["conflicts_with"] == [GOOD]
    good_quant = next(c for c in good["components"] if c["kind"] == "quantizer")
    assert good_quant["conflicts_with"] == []


def test_selecting_a_duplicate_name_fails_naming_both_owners(make_pm):
    pm = make_pm("good", "dup")
    with pytest.raises(PluginError) as err:
        pm.get_component("attention", "good-attn")
    msg = str(err.value)
    assert msg.startswith(f"attention backend 'good-attn' registered twice: by {DUP} and by {GOOD}; ")
    assert "block it with plugins.block / HINGE_PLUGINS_BLOCK" in msg


def test_selecting_another_name_beside_a_conflict_works(make_pm):
    pm = make_pm("good", "dup")
    assert pm.get_component("attention", "torch").plugin == "hinge"
    good_quant = next(c["name"] for c in _record(pm, "good")["components"] if c["kind"] == "quantizer")
    assert pm.get_component("quantizer", good_quant).plugin == "good"


def test_load_order_never_decides_a_duplicate_name(make_pm):
    """Swapping which object loads first (entry points load sorted by name) changes nothing."""

    def backend(tag):
        class Backend:
            @hookimpl
            def register_attention_backends(self, register):
                register(AttentionBackendSpec(name="shared-attn", factory=f"{tag}:Backend"))

        return Backend()

    messages = []
    for first, second in (("one", "two"), ("two", "one")):
        pm = make_pm(in_process("aaa", backend(first), "acme-a"),
                     in_process("zzz", backend(second), "acme-z"))
        with pytest.raises(PluginError) as err:
            pm.get_component("attention", "shared-attn")
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "by plugin 'aaa' (distribution acme-a 0.1.0) and by plugin 'zzz' (distribution acme-z" in messages[0]


def test_three_owners_of_one_name_are_all_named(make_pm):
    class Dup2:
        @hookimpl
        def register_attention_backends(self, register):
            register(AttentionBackendSpec(name="good-attn", factory="x:y"))

    pm = make_pm("good", "dup", in_process("dup2", Dup2(), "acme-dup2"))
    with pytest.raises(PluginError, match="'good-attn' registered 3 times: by ") as err:
        pm.get_component("attention", "good-attn")
    assert DUP in str(err.value) and GOOD in str(err.value) and "plugin 'dup2'" in str(err.value)


def test_duplicate_of_a_builtin_name_fails_when_selected_naming_hinge_and_the_plugin(make_pm):
    class Shadow:
        @hookimpl
        def register_quantizers(self, register):
            register(QuantizerSpec(name="none", factory="x:y"))

    pm = make_pm(in_process("shadow", Shadow(), "acme-shadow"))
    with pytest.raises(PlanError) as err:  # quantizer auto on an unquantized model selects 'none'
        resolve_plan(load_config(env={}), pm)
    msg = str(err.value)
    assert "quantizer 'none' registered twice" in msg
    assert "plugin 'hinge' (distribution hinge-llm" in msg
    assert "plugin 'shadow' (distribution acme-shadow 0.1.0)" in msg


def test_a_conflict_ends_when_one_owner_fails_later(make_pm):
    class Clash:
        @hookimpl
        def register_attention_backends(self, register):
            register(AttentionBackendSpec(name="good-attn", factory="x:y"))
            raise RuntimeError("half registered")

    pm = make_pm("good", in_process("clash", Clash(), "acme-clash"))
    assert _record(pm, "clash")["status"] == "failed"
    assert pm.get_component("attention", "good-attn").plugin == "good"
    assert pm.conflicts["attention"] == {}
    assert next(c for c in _record(pm, "good")["components"]
                if c["name"] == "good-attn")["conflicts_with"] == []


def test_misspelled_hookimpl_fails_only_its_plugin_with_a_did_you_mean(make_pm):
    pm = make_pm("good", "misspelled")
    rec = _record(pm, "misspelled")
    assert rec["status"] == "failed" and rec["components"] == []
    assert rec["error"] == ("hookimpl 'register_attention_backend' matches no hinge hook; "
                            "did you mean 'register_attention_backends'?")
    assert _record(pm, "good")["status"] == "ok"
    assert "never-registered" not in pm.names("attention")
    assert pm.get_component("attention", "good-attn").plugin == "good"


def test_selecting_a_component_of_a_misspelled_plugin_says_why_it_failed(make_pm):
    pm = make_pm("misspelled")
    with pytest.raises(PluginError) as err:
        pm.get_component("attention", "never-registered")
    msg = str(err.value)
    assert "unknown attention backend 'never-registered'" in msg
    assert (f"not loaded, may provide it: {MISSPELLED}: failed: hookimpl 'register_attention_backend' "
            "matches no hinge hook; did you mean 'register_attention_backends'?") in msg


def test_a_misspelled_hook_withholds_the_plugins_correctly_spelled_components_too(make_pm):
    class Half:
        @hookimpl
        def register_quantizers(self, register):
            register(QuantizerSpec(name="half-quant", factory="x:y"))

        @hookimpl
        def register_cache_policy(self, register):
            pass

    pm = make_pm(in_process("half", Half(), "acme-half"))
    rec = _record(pm, "half")
    assert rec["status"] == "failed" and rec["components"] == []
    assert "did you mean 'register_cache_policies'?" in rec["error"]
    assert "half-quant" not in pm.names("quantizer")


def test_misspelled_hookimpl_is_fatal_with_strict_naming_plugin_and_hook(make_pm):
    with pytest.raises(PluginError) as err:
        make_pm("good", "misspelled", strict=True)
    msg = str(err.value)
    assert msg.startswith(f"{MISSPELLED}: hookimpl 'register_attention_backend' matches no hinge hook")
    assert "did you mean 'register_attention_backends'?" in msg
    assert "strict plugins: any plugin failure is fatal" in msg


def test_allow_list_loads_only_the_named_plugins(make_pm):
    pm = make_pm("good", "broken", allow=["good"])
    assert _record(pm, "good")["status"] == "ok"
    assert _record(pm, "broken")["status"] == "not allowed"
    assert "hinge_fixture_broken.plugin" not in sys.modules


def test_allow_list_matches_distribution_names(make_pm):
    pm = make_pm("good", "dup", allow=["hinge_fixture_good"])
    assert _record(pm, "good")["status"] == "ok"
    assert _record(pm, "dup")["status"] == "not allowed"


def test_empty_allow_list_loads_builtins_only(make_pm):
    pm = make_pm("good", allow=[])
    assert pm.names("attention") == ["flashinfer", "torch", "triton"]


def test_hinge_plugins_env_sets_the_allow_list(make_pm):
    config = load_config(env={"HINGE_PLUGINS": "good"})
    pm = get_plugin_manager(config.plugins, entry_points=[fixture_entry_point("good"),
                                                           fixture_entry_point("dup")])
    assert pm.names("attention") == ["flashinfer", "good-attn", "torch", "triton"]


def test_block_list_skips_plugin_without_importing_it(make_pm):
    pm = make_pm("good", "dup", "misspelled", block=("dup", "hinge-fixture-misspelled"))
    assert _record(pm, "dup")["status"] == "blocked"
    assert _record(pm, "misspelled")["status"] == "blocked"
    assert "hinge_fixture_dup.plugin" not in sys.modules
    assert pm.get_component("attention", "good-attn").plugin == "good"


def test_a_register_hook_that_raises_isolates_its_plugin(make_pm):
    class Half:
        @hookimpl
        def register_attention_backends(self, register):
            register(AttentionBackendSpec(name="half-attn", factory="x:y"))
            raise RuntimeError("kernel table missing")

    pm = make_pm(in_process("half", Half(), "acme-half"), "good")
    rec = _record(pm, "half")
    assert rec["status"] == "failed"
    assert rec["error"] == "register_attention_backends raised RuntimeError: kernel table missing"
    assert "half-attn" not in pm.names("attention")
    with pytest.raises(PluginError, match="kernel table missing"):
        make_pm(in_process("half", Half(), "acme-half"), strict=True)


def test_registering_the_wrong_spec_type_fails_the_plugin(make_pm):
    class Wrong:
        @hookimpl
        def register_attention_backends(self, register):
            register(QuantizerSpec(name="q", factory="x:y"))

    rec = _record(make_pm(in_process("wrong", Wrong())), "wrong")
    assert rec["status"] == "failed"
    assert "register_attention_backends must register AttentionBackendSpec objects" in rec["error"]


def test_hookimpl_with_an_argument_the_spec_lacks_fails_the_plugin(make_pm):
    class Extra:
        @hookimpl
        def register_quantizers(self, register, device):
            pass

    rec = _record(make_pm(in_process("extra", Extra(), "acme-extra")), "extra")
    assert rec["status"] == "failed" and "registration failed: PluginValidationError" in rec["error"]
    assert "device" in rec["error"]


def test_two_entry_points_with_one_name_keep_the_first_and_fail_the_second(make_pm):
    other = FakeEntryPoint("good", "hinge_fixture_dup.plugin", FakeDist("acme-other"))
    pm = make_pm("good", other)
    failed = [p for p in pm.listing() if p["status"] == "failed"]
    assert len(failed) == 1 and "already used by plugin 'good'" in failed[0]["error"]


def test_discovery_reads_the_hinge_plugins_entry_point_group(monkeypatch):
    import hinge.plugins.manager as manager

    asked = []

    def fake_entry_points(group):
        asked.append(group)
        return [fixture_entry_point("good")]

    monkeypatch.setattr(manager.md, "entry_points", fake_entry_points)
    pm = get_plugin_manager(PluginSettings())
    assert asked == ["hinge.plugins"] and "good-attn" in pm.names("attention")


def test_importing_the_builtin_plugin_imports_no_torch():
    code = ("import sys, hinge.builtin.plugin, hinge.plugins.manager, hinge.plugins.plan;"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
