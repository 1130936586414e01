"""FA4's on-disk JIT cache: switched on (the package's default is off) before flash_attn.cute is
imported, under ~/.cache by default; the user's own environment wins."""

from __future__ import annotations

from pathlib import Path

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
