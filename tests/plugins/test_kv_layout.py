"""The KV pool every attention backend of a plan reads: the page size they share (chosen when
page_size is unset, checked when it is set), the page layout and the KV dtype."""

from __future__ import annotations

import pytest
from plugin_fakes import in_process

from hinge import hookimpl
from hinge.config import load_config
from hinge.plugins import (
    AttentionBackendSpec,
    AttentionCapabilities,
    CacheCapabilities,
    CachePolicySpec,
)
from hinge.plugins.plan import PlanError, resolve_plan

H200 = (9, 0)


def attn(name, **caps):
    return AttentionBackendSpec(name=name, factory=lambda options, build: None,
                                capabilities=AttentionCapabilities(**caps))


class Backends:
    def __init__(self, *specs):
        self.specs = specs

    @hookimpl
    def register_attention_backends(self, register):
        for spec in self.specs:
            if isinstance(spec, AttentionBackendSpec):
                register(spec)

    @hookimpl
    def register_cache_policies(self, register):
        for spec in self.specs:
            if isinstance(spec, CachePolicySpec):
                register(spec)


#: FA4's TMA paged path on sm_90: pages of one key tile
TMA = attn("tma", page_sizes=frozenset({128}), preferred_page_sizes=(128,))
ANY = attn("any")
SMALL = attn("small", page_sizes=frozenset({16, 32}))


def plan(make_pm, *specs, **overrides):
    overrides.setdefault("cache", "none")  # NOTE: no entry point is loaded; radix is a plugin
    overrides.setdefault("device", "cpu")
    config = load_config(env={}, overrides=overrides)
    return resolve_plan(config, make_pm(in_process("p", Backends(*specs), "acme")), {},
                        device_capability=H200)


def test_an_unset_page_size_becomes_the_one_the_backend_prefers(make_pm):
    p = plan(make_pm, TMA, attention="tma")
    assert p.config.page_size == 128 and p.to_dict()["page_size"] == 128
    assert p.build_context().page_size == 128, "the engine builds the KV pool from this"
    assert "page_size = 128 (preferred by tma; the cpu default is 16)" in p.notes
    assert "page_size: 128" in p.describe()


def test_a_backend_without_preference_keeps_the_device_default_and_adds_no_note(make_pm):
    p = plan(make_pm, ANY, attention="any")
    assert p.config.page_size == 16 and p.notes == ()


def test_an_explicit_page_size_wins_when_the_backend_takes_it(make_pm):
    assert plan(make_pm, SMALL, attention="small", page_size=32).config.page_size == 32


def test_an_explicit_page_size_the_backend_cannot_take_is_refused_naming_its_sizes(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, TMA, attention="tma", page_size=16)
    assert ("attention backend 'tma' (p) does not support page_size 16; it supports 128 "
            "(set page_size, or leave it unset to let the plan choose)") in str(err.value)


def test_per_phase_backends_share_the_page_size_both_take(make_pm):
    p = plan(make_pm, TMA, ANY, attention_prefill="tma", attention_decode="any")
    assert p.config.page_size == 128
    p = plan(make_pm, ANY, TMA, attention_prefill="any", attention_decode="tma")
    assert p.config.page_size == 128, "the decode backend's preference counts too"


def test_without_a_preference_the_smallest_common_size_is_chosen(make_pm):
    mid = attn("mid", page_sizes=frozenset({32, 64}))
    p = plan(make_pm, SMALL, mid, attention_prefill="small", attention_decode="mid")
    assert p.config.page_size == 32
    assert any(n.startswith("page_size = 32 (the smallest every attention backend takes") for n in p.notes)


def test_backends_with_no_common_page_size_are_refused_naming_both(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, TMA, SMALL, attention_prefill="tma", attention_decode="small")
    msg = str(err.value)
    assert "no page size suits every selected component" in msg
    assert "attention backend 'tma' (p) takes 128" in msg and "attention backend 'small' (p) takes 16, 32" in msg


def test_the_cache_policys_page_multiple_limits_the_choice(make_pm):
    cache = CachePolicySpec(name="blocky", factory=lambda o, b: None,
                            capabilities=CacheCapabilities(page_size_multiple=32))
    p = plan(make_pm, SMALL, cache, attention="small", cache="blocky")
    assert p.config.page_size == 32


def test_a_defaulted_track_interval_follows_the_chosen_page_size(make_pm):
    p = plan(make_pm, TMA, attention="tma")
    assert p.config.track_interval == 128, "the cpu default of 64 rounded up to whole 128-token pages"


def test_an_explicit_track_interval_off_the_chosen_page_grid_is_refused(make_pm):
    with pytest.raises(PlanError, match="track_interval 64 is not a multiple of page_size 128"):
        plan(make_pm, TMA, attention="tma", track_interval=64)


def test_a_backend_reading_another_page_layout_is_refused(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, attn("hnd", kv_layout="hnd"), attention="hnd")
    assert "reads hnd KV pages, but the KV pool builds nhd pages" in str(err.value)


def test_a_backend_reading_another_kv_dtype_is_refused(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, attn("half", kv_dtypes=frozenset({"bfloat16"})), attention="half")
    assert ("reads KV in bfloat16, but the pool holds KV in the model dtype float32 (set dtype)"
            in str(err.value))
    assert plan(make_pm, attn("half", kv_dtypes=frozenset({"bfloat16"})), attention="half",
                dtype="bfloat16").dtype == "bfloat16"


def test_preferred_page_sizes_must_be_among_the_accepted_ones():
    with pytest.raises(ValueError, match="must be positive and among page_sizes"):
        AttentionCapabilities(page_sizes=frozenset({16}), preferred_page_sizes=(128,))


def test_the_user_choice_survives_resolving_twice():
    config = load_config(env={}, overrides={"device": "cpu", "page_size": 16}).resolved()
    assert not config.resolved().page_size_is_default
    default = load_config(env={}, overrides={"device": "cpu"}).resolved().resolved()
    assert default.page_size_is_default
    assert not default.model_copy(update={"page_size": 64}).page_size_is_default
