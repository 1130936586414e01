"""Attention per phase: ``attention`` for every step, or ``attention_prefill`` and
``attention_decode`` picking different backends (prefill and mixed steps / decode and verify
steps); each phase's graph decision asks that phase's backend."""

from __future__ import annotations

import pytest
from plugin_fakes import in_process
from pydantic import BaseModel, ConfigDict

from hinge import hookimpl
from hinge.config import ConfigError, load_config
from hinge.plugins import AttentionBackendSpec, AttentionCapabilities
from hinge.plugins.plan import PlanError, resolve_plan

H200 = (9, 0)


class SplitOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    split_size: int = 256


def built(options, build):
    return ("built", options)


def attn(name, options_model=None, **caps):
    return AttentionBackendSpec(name=name, factory=built, options_model=options_model,
                                capabilities=AttentionCapabilities(**caps))


PREFILL_ONLY = attn("prefiller", phases=frozenset({"prefill", "mixed"}), prefill_graph=True,
                    devices=frozenset({"cuda"}), options_model=SplitOptions)
DECODER = attn("decoder", decode_graph=True, graph_note="")


class Backends:
    @hookimpl
    def register_attention_backends(self, register):
        register(PREFILL_ONLY)
        register(DECODER)


def plan(make_pm, **overrides):
    overrides.setdefault("cache", "none")  # NOTE: no entry point is loaded; radix is a plugin
    overrides.setdefault("device", "cuda")
    config = load_config(env={}, overrides=overrides)
    return resolve_plan(config, make_pm(in_process("p", Backends(), "acme")), {},
                        device_capability=H200)


def test_one_backend_runs_every_phase_when_no_phase_is_named(make_pm):
    p = plan(make_pm, attention="decoder", device="cpu")
    assert p.attention_decode is None and p.attention_backends() == [p.attention]
    assert {p.attention_for(ph).name for ph in ("prefill", "mixed", "decode", "verify")} == {"decoder"}
    assert p.to_dict()["attention_decode"] is None


def test_per_phase_names_pick_a_backend_for_each_phase(make_pm):
    p = plan(make_pm, attention_prefill="prefiller", attention_decode="decoder")
    assert (p.attention.name, p.attention_decode.name) == ("prefiller", "decoder")
    assert [p.attention_for(ph).name for ph in ("prefill", "mixed", "decode", "verify", "draft")] == [
        "prefiller", "prefiller", "decoder", "decoder", "decoder"]
    lines = p.describe()
    assert any(line.startswith("attention (prefill, mixed): prefiller (plugin p") for line in lines)
    assert any(line.startswith("attention (decode, verify): decoder (plugin p") for line in lines)
    assert p.to_dict()["attention_decode"]["name"] == "decoder"


def test_one_named_phase_leaves_the_other_to_attention(make_pm):
    p = plan(make_pm, attention="decoder", attention_prefill="prefiller")
    assert (p.attention.name, p.attention_decode.name) == ("prefiller", "decoder")


def test_the_same_backend_named_for_both_phases_is_one_component(make_pm):
    p = plan(make_pm, attention="decoder", attention_decode="decoder")
    assert p.attention_decode is None


def test_phase_options_go_to_that_phases_backend(make_pm):
    p = plan(make_pm, attention_prefill="prefiller", attention_prefill_options={"split_size": 64},
             attention_decode="decoder")
    assert p.attention.options == SplitOptions(split_size=64)
    p = plan(make_pm, attention="prefiller", attention_options={"split_size": 32},
             attention_decode="decoder")
    assert p.attention.options == SplitOptions(split_size=32), "attention_options follow attention's name"


def test_each_phase_graph_asks_only_that_phases_backend(make_pm):
    """prefiller captures prefill graphs only, decoder decode graphs only: split, both are on."""
    p = plan(make_pm, attention_prefill="prefiller", attention_decode="decoder")
    assert p.graphs["prefill"].enabled and p.graphs["decode"].enabled
    both = plan(make_pm, attention="decoder")
    assert not both.graphs["prefill"].enabled
    assert "decoder: attention backend does not support prefill graphs" in both.graphs["prefill"].reasons[0]


def test_a_backend_is_refused_for_a_phase_it_does_not_run(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, attention_prefill="decoder", attention_decode="prefiller")
    assert "attention backend 'prefiller' (p) does not run decode batches" in str(err.value)
    with pytest.raises(PlanError, match="'prefiller' \\(p\\) does not run decode batches"):
        plan(make_pm, attention="prefiller")


def test_verify_graphs_need_a_decode_backend_that_runs_verify_batches(make_pm):
    no_verify = attn("noverify", phases=frozenset({"prefill", "mixed", "decode"}))

    class More:
        @hookimpl
        def register_attention_backends(self, register):
            register(no_verify)

    config = load_config(env={}, overrides={"cache": "none", "device": "cuda", "attention": "noverify",
                                            "graphs": {"tokens_per_request": [1, 4]}})
    with pytest.raises(PlanError, match="does not run verify batches"):
        resolve_plan(config, make_pm(in_process("m", More(), "more")), {}, device_capability=H200)


def test_deterministic_mode_refuses_two_backends(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, attention_prefill="torch", attention_decode="triton", deterministic=True)
    assert ("deterministic = true needs one attention backend for every phase (a prefill row and a "
            "decode row must give the same bits), but prefill runs 'torch' and decode 'triton'") in str(err.value)


def test_auto_fills_only_the_phase_left_unnamed(make_pm):
    p = plan(make_pm, attention_decode="decoder", device="cpu")
    assert (p.attention.name, p.attention_decode.name) == ("torch", "decoder")
    assert p.notes == ("attention = auto -> torch (first choice on cpu)",)
    both = plan(make_pm, attention_prefill="prefiller", attention_decode="decoder")
    assert both.notes == () and both.config.attention == "prefiller"


def test_per_phase_auto_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="per-phase attention names a backend; leave it unset"):
        load_config(env={}, overrides={"attention_decode": "auto"})


def test_phase_backends_come_from_the_environment_too():
    config = load_config(env={"HINGE_ATTENTION_PREFILL": "fa4", "HINGE_ATTENTION_DECODE": "flashinfer",
                              "HINGE_ATTENTION_DECODE_OPTIONS": '{"backend": "fa2"}'})
    assert config.phase_attention("prefill") == ("fa4", {})
    assert config.phase_attention("decode") == ("flashinfer", {"backend": "fa2"})
