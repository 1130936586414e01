from __future__ import annotations

import json

import pytest
from plugin_fakes import in_process
from pydantic import BaseModel, ConfigDict, Field

from hinge import hookimpl
from hinge.config import load_config
from hinge.plugins import (
    AttentionBackendSpec,
    AttentionCapabilities,
    CacheCapabilities,
    CachePolicySpec,
    GraphVerdict,
    OptionsError,
    QuantizerCapabilities,
    QuantizerSpec,
    SpeculatorCapabilities,
    SpeculatorSpec,
)
from hinge.plugins.plan import PlanError, resolve_plan

ALL_GRAPHS = {"prefill_graph": True, "decode_graph": True, "draft_graph": True}
H200 = (9, 0)


class FakeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    splits: int = Field(1, ge=1, le=8, description="KV splits, 1..8")


def built(options, build):
    return ("built", options, build)


def _registers(spec_type):
    """A hookimpl method registering the plugin's specs of ``spec_type``."""

    @hookimpl
    def register_all(self, register):
        for s in self.specs:
            if isinstance(s, spec_type):
                register(s)

    return register_all


class Components:
    """An in-process plugin registering whatever specs it is given."""

    def __init__(self, *specs):
        self.specs = specs

    register_attention_backends = _registers(AttentionBackendSpec)
    register_speculators = _registers(SpeculatorSpec)
    register_quantizers = _registers(QuantizerSpec)
    register_cache_policies = _registers(CachePolicySpec)


def attn(name="fast", options_model=None, **caps):
    return AttentionBackendSpec(name=name, factory=built, options_model=options_model,
                                capabilities=AttentionCapabilities(**caps))


class Veto:
    def __init__(self, phases, reason="needs static shapes", allow=False, max_batch=None):
        self.phases, self.reason, self.allow, self.max_batch = phases, reason, allow, max_batch
        self.calls = []

    @hookimpl
    def graph_capture_eligibility(self, phase, plan):
        self.calls.append(phase)
        if phase in self.phases:
            return GraphVerdict(allow=self.allow, reason=self.reason, max_batch=self.max_batch)
        return None


def plan_for(make_pm, *plugins, model_info=None, capability=H200, **overrides):
    eps = [in_process(f"p{i}", p, f"acme-p{i}") for i, p in enumerate(plugins)]
    overrides.setdefault("cache", "none")  # NOTE: no entry point is loaded; the default radix is a plugin
    config = load_config(env={}, overrides=overrides)
    return resolve_plan(config, make_pm(*eps), model_info or {}, device_capability=capability)


# -- selection and options ------------------------------------------------------------------------


def test_default_plan_selects_the_builtins_with_their_owner(make_pm):
    plan = plan_for(make_pm)
    assert (plan.attention.name, plan.quantizer.name, plan.cache.name) == ("torch", "none", "none")
    assert plan.attention.plugin == "hinge" and plan.attention.distribution == "hinge-llm"
    assert plan.speculator is None and plan.dtype == "float32"


def test_unknown_component_name_lists_installed_names(make_pm):
    with pytest.raises(PlanError) as err:
        plan_for(make_pm, Components(attn("fast")), attention="fa5")
    assert "unknown attention backend 'fa5'; installed: fast, flashinfer, torch, triton" in str(err.value)
    assert "see `hinge plugins`" in str(err.value)


def test_unknown_component_name_lists_failed_plugins(make_pm):
    with pytest.raises(PlanError) as err:
        resolve_plan(load_config(env={}, overrides={"cache": "radix"}), make_pm("broken"), {})
    msg = str(err.value)
    assert "unknown cache policy 'radix'; installed: none" in msg
    assert "plugin 'broken' (distribution hinge-fixture-broken 0.1.0): failed" in msg


def test_unknown_option_is_rejected_listing_the_known_ones(make_pm):
    with pytest.raises(OptionsError) as err:
        plan_for(make_pm, Components(attn(options_model=FakeOptions)), attention="fast",
                 attention_options={"split": 2})
    assert str(err.value) == "unknown option 'split' for attention backend 'fast'; known options: splits"


def test_invalid_option_value_names_the_option_and_range(make_pm):
    with pytest.raises(OptionsError, match="invalid options for attention backend 'fast': splits: "
                                           "Input should be less than or equal to 8"):
        plan_for(make_pm, Components(attn(options_model=FakeOptions)), attention="fast",
                 attention_options={"splits": 9})


def test_options_are_validated_into_the_components_model(make_pm):
    plan = plan_for(make_pm, Components(attn(options_model=FakeOptions)), attention="fast",
                    attention_options={"splits": 4})
    assert plan.attention.options == FakeOptions(splits=4)


def test_a_component_without_options_rejects_any(make_pm):
    with pytest.raises(OptionsError, match="cache policy 'none' takes no options, got: size"):
        plan_for(make_pm, cache_options={"size": 1})


def test_build_calls_the_factory_with_options_and_build_context(make_pm):
    plan = plan_for(make_pm, Components(attn(options_model=FakeOptions)), attention="fast",
                    attention_options={"splits": 2})
    ctx = plan.build_context()
    tag, options, build = plan.build_attention(ctx)
    assert (tag, options.splits, build.page_size, build.device) == ("built", 2, 16, "cpu")
    assert str(build.dtype) == "torch.float32"


def test_build_with_a_factory_that_fails_to_import_names_plugin_and_factory(make_pm):
    spec = AttentionBackendSpec(name="lazy", factory="hinge_no_such_kernel_mod:Backend")
    plan = plan_for(make_pm, Components(spec), attention="lazy")
    with pytest.raises(PlanError) as err:
        plan.build_attention(plan.build_context())
    msg = str(err.value)
    assert "attention backend 'lazy' of plugin 'p0' (distribution acme-p0)" in msg
    assert "'hinge_no_such_kernel_mod:Backend' failed to import: ModuleNotFoundError" in msg


def test_plan_is_frozen_and_serialises(make_pm):
    plan = plan_for(make_pm)
    with pytest.raises(AttributeError):
        plan.device = "cuda"
    json.dumps(plan.to_dict())


# -- capability checks and validate_plan ---------------------------------------------------------


def test_capability_mismatches_are_aggregated_into_one_error(make_pm):
    spec = attn("gpu-only", devices=frozenset({"cuda"}), dtypes=frozenset({"bfloat16"}),
                page_sizes=frozenset({64}))
    with pytest.raises(PlanError) as err:
        plan_for(make_pm, Components(spec), attention="gpu-only", page_size=16)
    msg = str(err.value)
    assert "attention backend 'gpu-only' (p0) does not run on cpu; it supports cuda" in msg
    assert "does not support dtype float32; it supports bfloat16 (set dtype)" in msg
    assert "does not support page_size 16; it supports 64 (set page_size" in msg


def test_minimum_compute_capability_is_checked_against_the_gpu(make_pm):
    spec = attn("blackwell", min_compute_capability=(10, 0))
    with pytest.raises(PlanError, match="needs CUDA compute capability >= 10.0, this GPU has 9.0"):
        plan_for(make_pm, Components(spec), attention="blackwell", device="cuda")
    assert plan_for(make_pm, Components(spec), attention="blackwell", device="cuda",
                    capability=(10, 0)).attention.name == "blackwell"


def test_deterministic_needs_batch_invariant_components(make_pm):
    with pytest.raises(PlanError, match="deterministic = true but attention backend 'fast' .* is not batch"):
        plan_for(make_pm, Components(attn()), attention="fast", deterministic=True)
    assert plan_for(make_pm, deterministic=True).config.deterministic


def test_sliding_window_model_needs_a_backend_that_supports_it(make_pm):
    info = {"sliding_window": 128, "num_attention_heads": 4, "hidden_size": 64}
    with pytest.raises(PlanError, match=r"uses a sliding window \(128\)"):
        plan_for(make_pm, Components(attn()), attention="fast", model_info=info)
    off = {**info, "use_sliding_window": False}  # Qwen3 ships a window it does not use
    assert plan_for(make_pm, Components(attn()), attention="fast", model_info=off)


def test_head_dim_outside_the_claimed_set_is_rejected(make_pm):
    spec = attn(head_dims=frozenset({128}))
    with pytest.raises(PlanError, match="does not support head_dim 16; it supports 128"):
        plan_for(make_pm, Components(spec), attention="fast",
                 model_info={"num_attention_heads": 4, "hidden_size": 64})


def test_hybrid_model_needs_a_cache_that_stores_recurrent_state(make_pm):
    radix = CachePolicySpec(name="radix", factory=built,
                            capabilities=CacheCapabilities(prefix_sharing=True))
    info = {"layer_types": ["linear_attention", "full_attention"]}
    with pytest.raises(PlanError, match="recurrent layers and cache policy 'radix'"):
        plan_for(make_pm, Components(radix), cache="radix", model_info=info)


def test_validate_plan_reasons_from_every_plugin_are_joined_into_one_error(make_pm):
    class A:
        @hookimpl
        def validate_plan(self, plan):
            return [f"page_size {plan.config.page_size} too small, set page_size to 64"]

    class B:
        @hookimpl
        def validate_plan(self, plan):
            return ["speculator needs attention fa4"] if plan.speculator is None else []

    class Silent:
        @hookimpl
        def validate_plan(self, plan):
            return None

    with pytest.raises(PlanError) as err:
        plan_for(make_pm, A(), B(), Silent())
    msg = str(err.value)
    assert "p0: page_size 16 too small, set page_size to 64" in msg
    assert "p1: speculator needs attention fa4" in msg


# -- quantizer = auto ------------------------------------------------------------------------------


def _quant(name, *methods):
    return QuantizerSpec(name=name, factory=built,
                         capabilities=QuantizerCapabilities(checkpoint_methods=frozenset(methods)))


def test_auto_quantizer_is_none_for_an_unquantized_checkpoint(make_pm):
    assert plan_for(make_pm, Components(_quant("fp4", "nvfp4"))).quantizer.name == "none"


def test_auto_quantizer_picks_the_one_that_claims_the_checkpoint(make_pm, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    eps = [in_process("q", Components(_quant("fp4", "nvfp4"), _quant("fp8", "fp8")), "acme-q")]
    config = load_config(env={}, overrides={"model": str(tmp_path), "cache": "none"})
    assert resolve_plan(config, make_pm(*eps)).quantizer.name == "fp4"


def test_auto_quantizer_fails_when_nothing_or_several_claim_the_checkpoint(make_pm):
    info = {"quantization_config": {"quant_method": "fp8"}}
    with pytest.raises(PlanError, match=r"quantized \(fp8\) and no installed quantizer claims it; "
                                        r"installed quantizers: fp4, none"):
        plan_for(make_pm, Components(_quant("fp4", "nvfp4")), model_info=info)
    with pytest.raises(PlanError, match="quantizers a, b all claim this checkpoint"):
        plan_for(make_pm, Components(_quant("a", "fp8"), _quant("b", "fp8")), model_info=info)


# -- graph decisions --------------------------------------------------------------------------------


def test_graph_is_on_when_every_component_allows_it_and_nobody_vetoes(make_pm):
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS)), attention="fast", device="cuda",
                    max_running_requests=20, chunked_prefill_size=3000)
    assert plan.graphs["prefill"].enabled and plan.graphs["decode"].enabled
    assert plan.graphs["prefill"].reasons == ()
    assert plan.describe()[-3:] == [
        "prefill graph: on, token counts 64, 128, 256, 512, 1024, 2048, 3000 (up to 20 requests)",
        "decode graph: on, batch sizes 1, 2, 4, 8, 16, 20 x 1 token per request",
        "draft graph: off, because no speculator selected"]
    assert plan.to_dict()["graphs"]["decode"]["sizes"] == [1, 2, 4, 8, 16, 20]


def test_a_component_without_graph_support_turns_the_phase_off_naming_it(make_pm):
    spec = attn(decode_graph=True, graph_note="variable-length prefill kernel")
    plan = plan_for(make_pm, Components(spec), attention="fast", device="cuda")
    assert plan.graphs["decode"].enabled
    assert not plan.graphs["prefill"].enabled
    assert plan.graphs["prefill"].describe() == (
        "prefill graph: off, because fast: attention backend does not support prefill graphs "
        "(variable-length prefill kernel)")


def test_a_veto_under_auto_downgrades_with_its_reason(make_pm):
    veto = Veto({"decode"})
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS)), veto, attention="fast", device="cuda")
    assert plan.graphs["prefill"].enabled
    assert not plan.graphs["decode"].enabled
    assert plan.graphs["decode"].reasons == ("p1: needs static shapes",)
    assert veto.calls == ["prefill", "decode"]  # no speculator: draft needs no verdict


def test_a_veto_under_require_is_a_startup_error_with_its_reason(make_pm):
    with pytest.raises(PlanError) as err:
        plan_for(make_pm, Components(attn(**ALL_GRAPHS)), Veto({"decode"}), attention="fast",
                 device="cuda", graphs={"decode": "require"})
    assert "graphs.decode = require, but: p1: needs static shapes" in str(err.value)


def test_require_fails_when_a_component_cannot_be_captured(make_pm):
    with pytest.raises(PlanError, match="graphs.prefill = require, but: torch: attention backend "
                                        "does not support prefill graphs"):
        plan_for(make_pm, device="cuda", graphs={"prefill": "require"})


def test_every_eligibility_impl_runs_and_any_veto_wins(make_pm):
    allow, deny = Veto({"decode"}, allow=True), Veto({"decode"}, reason="too many experts")
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS)), allow, deny, attention="fast",
                    device="cuda")
    assert allow.calls == deny.calls == ["prefill", "decode"]
    assert not plan.graphs["decode"].enabled
    assert plan.graphs["decode"].reasons == ("p2: too many experts",)


def test_the_smallest_max_batch_wins(make_pm):
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS)), Veto({"decode"}, allow=True, max_batch=32),
                    Veto({"decode"}, allow=True, max_batch=8), attention="fast", device="cuda")
    assert plan.graphs["decode"].enabled and plan.graphs["decode"].max_batch == 8


def test_off_by_config(make_pm):
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS)), attention="fast", device="cuda",
                    graphs="off")
    assert [plan.graphs[p].reasons for p in ("prefill", "decode")] == [("off by config",)] * 2
    assert not plan.graphs["prefill"].enabled


def test_cpu_never_gets_graphs(make_pm):
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS)), attention="fast")
    assert plan.graphs["decode"].reasons == ("cpu: CUDA graphs need device cuda",)
    assert not plan.graphs["decode"].enabled


def test_speculator_phases_and_what_they_capture(make_pm):
    eagle = SpeculatorSpec(name="eagle", factory=built, capabilities=SpeculatorCapabilities(
        decode_graph=True, hidden_state_mode="layers", needs_state_tracking=True))
    plan = plan_for(make_pm, Components(attn(**ALL_GRAPHS), eagle), attention="fast",
                    speculator="eagle", device="cuda")
    assert plan.speculator.name == "eagle"
    assert not plan.graphs["prefill"].enabled  # eagle does not claim prefill graphs
    assert plan.graphs["prefill"].reasons == ("eagle: speculator does not support prefill graphs",)
    decode = plan.graphs["decode"]
    assert decode.enabled
    assert decode.needs == ("hidden states (layers) for eagle", "per-position recurrent states (verify)")
    assert plan.graphs["draft"].reasons == ("eagle: speculator does not support draft graphs",)


def test_eligibility_returning_something_else_than_a_verdict_names_the_plugin(make_pm):
    class Bad:
        @hookimpl
        def graph_capture_eligibility(self, phase):
            return False

    with pytest.raises(PlanError, match="plugin 'p0': graph_capture_eligibility must return a "
                                        "GraphVerdict or None, got False"):
        plan_for(make_pm, Bad())


def test_a_decision_hook_that_raises_is_reported_with_its_plugin(make_pm):
    class Raises:
        @hookimpl
        def validate_plan(self, plan):
            raise KeyError("page_size")

    with pytest.raises(PlanError, match="plugin 'p0': validate_plan raised KeyError: 'page_size'"):
        plan_for(make_pm, Raises())

    class RaisesOnGraphs:
        @hookimpl
        def graph_capture_eligibility(self, phase, plan):
            raise RuntimeError("no GPU table")

    with pytest.raises(PlanError, match=r"plugin 'p0': graph_capture_eligibility\('prefill'\) raised"):
        plan_for(make_pm, RaisesOnGraphs())
