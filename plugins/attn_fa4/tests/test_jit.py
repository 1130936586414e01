"""FA4's on-disk JIT cache: switched on (the package's default is off) before flash_attn.cute is
imported, under ~/.cache by default; the user's own environment wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from hinge_fa4.jit import DIRECTORY, ENABLED, configure_jit_cache, default_cache_dir


def test_the_cache_is_switched_on_under_the_users_cache_directory():
    env = {"XDG_CACHE_HOME": "/srv/cache"}
    assert configure_jit_cache(True, None, env) == "/srv/cache/hinge/flash_attention_cute_dsl"
    assert env[ENABLED] == "1" and env[DIRECTORY] == "/srv/cache/hinge/flash_attention_cute_dsl"


def test_an_explicit_directory_option_is_used(tmp_path):
    env: dict[str, str] = {}
    assert configure_jit_cache(True, str(tmp_path), env) == str(tmp_path)


def test_the_environment_wins_over_the_options():
    env = {ENABLED: "0"}
    assert configure_jit_cache(True, "/x", env) is None and env == {ENABLED: "0"}
    env = {DIRECTORY: "/mine"}
    assert configure_jit_cache(True, "/x", env) == "/mine"


def test_the_option_can_turn_it_off():
    env: dict[str, str] = {}
    assert configure_jit_cache(False, None, env) is None and env[ENABLED] == "0"


def test_the_default_directory_falls_back_to_home():
    assert default_cache_dir({}) == Path.home() / ".cache" / "hinge" / "flash_attention_cute_dsl"


# -- the private 64-row split call -------------------------------------------------------------


def _fake_interface(monkeypatch, fwd):
    import sys
    import types

    for name in ("flash_attn", "flash_attn.cute"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    interface = types.ModuleType("flash_attn.cute.interface")
    if fwd is not None:
        interface._flash_attn_fwd = fwd
    monkeypatch.setitem(sys.modules, "flash_attn.cute.interface", interface)


def test_a_64_row_split_call_uses_flash_attns_private_forward_when_it_takes_a_tile(monkeypatch):
    from hinge_fa4.kernel import private_forward

    def _flash_attn_fwd(q, k, v, tile_mn=None, num_threads=384, pack_gqa=None,
                        intra_wg_overlap=None, mma_pv_is_rs=None):
        return q

    _fake_interface(monkeypatch, _flash_attn_fwd)
    assert private_forward(64) is _flash_attn_fwd
    assert private_forward(128) is None  # flash-attn's own tile: the public call
    assert private_forward(128, tuned=True) is _flash_attn_fwd  # its tile, another schedule


@pytest.mark.parametrize("what", ["missing", "no tile_mn"])
def test_a_64_row_split_call_falls_back_to_128_rows_with_a_warning(monkeypatch, caplog, what):
    from hinge_fa4.kernel import private_forward

    def _flash_attn_fwd(q, k, v, num_threads=384, pack_gqa=None):  # an API without tile_mn
        return q

    _fake_interface(monkeypatch, None if what == "missing" else _flash_attn_fwd)
    with caplog.at_level("WARNING", logger="hinge_fa4.kernel"):
        assert private_forward(64) is None
    assert "128-row tiles" in caplog.text
