from __future__ import annotations

import pytest

from hinge.config import ConfigError, EngineConfig, load_config

INTERNALS_DEFAULTS = {
    "model": None, "device": "auto", "dtype": "auto", "attention": "auto", "attention_options": {},
    "attention_prefill": None, "attention_prefill_options": {},
    "attention_decode": None, "attention_decode_options": {},
    "quantizer": "auto", "quantizer_options": {}, "speculator": None, "speculator_options": {},
    "cache": "radix", "cache_options": {},
    "plugins": {"allow": None, "block": [], "strict": False},
    "graphs": {"prefill": "auto", "decode": "auto", "draft": "auto", "tokens_per_request": (1,)},
    "deterministic": False, "page_size": None, "kv_cache_bytes": None, "mem_fraction_static": 0.85,
    "max_running_requests": 64, "chunked_prefill_size": None, "max_model_len": None,
    "state_dtype": "float32", "seed": 0, "load_format": "auto", "cpu_threads": None,
    "warmup": "auto", "gc_freeze": "auto",
    "track_interval": None, "checkpoint_slots": None,
}


def test_defaults_are_exactly_the_fields_of_docs_internals():
    assert load_config(env={}).model_dump() == INTERNALS_DEFAULTS


def test_auto_device_and_per_device_defaults_are_decided_by_resolved(monkeypatch):
    import torch

    from hinge.config import DEVICE_DEFAULTS

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = load_config(env={}).resolved()
    assert (cpu.device, cpu.page_size, cpu.chunked_prefill_size, cpu.track_interval) == ("cpu", 16, 512, 64)
    assert cpu.resolved_dtype == "float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = load_config(env={}).resolved()
    assert (gpu.device, gpu.chunked_prefill_size) == ("cuda", DEVICE_DEFAULTS["cuda"]["chunked_prefill_size"])
    assert gpu.resolved_dtype == "bfloat16" and gpu.state_dtype == "float32"
    mine = load_config(env={}, overrides={"device": "cpu", "page_size": 32, "chunked_prefill_size": 0,
                                          "track_interval": 96})
    assert mine.resolved().model_dump() == mine.model_dump(), "explicit values are never changed"


def test_cli_beats_env_beats_yaml_beats_defaults(tmp_path):
    path = tmp_path / "hinge.yaml"
    path.write_text("page_size: 32\nseed: 7\nmax_running_requests: 8\ngraphs: {decode: off}\n")
    config = load_config(path, env={"HINGE_PAGE_SIZE": "64", "HINGE_SEED": "9"},
                         overrides={"page_size": 128, "seed": None})
    assert (config.page_size, config.seed, config.max_running_requests) == (128, 9, 8)
    assert config.graphs.decode == "off" and config.graphs.prefill == "auto"


def test_nested_settings_merge_key_by_key(tmp_path):
    path = tmp_path / "hinge.yaml"
    path.write_text("graphs: {prefill: require}\nplugins: {block: [acme]}\n")
    config = load_config(path, env={"HINGE_GRAPHS_DECODE": "off"},
                         overrides={"plugins": {"strict": True}})
    assert (config.graphs.prefill, config.graphs.decode) == ("require", "off")
    assert config.plugins.block == ["acme"] and config.plugins.strict


def test_hinge_plugins_env_sets_the_allow_list():
    assert load_config(env={"HINGE_PLUGINS": "fa4, radix"}).plugins.allow == ["fa4", "radix"]
    assert load_config(env={"HINGE_PLUGINS": ""}).plugins.allow == []
    assert load_config(env={}).plugins.allow is None
    assert load_config(env={"HINGE_STRICT_PLUGINS": "1"}).plugins.strict


def test_options_come_from_yaml_mappings_or_json_env(tmp_path):
    path = tmp_path / "hinge.yaml"
    path.write_text("attention: fa4\nattention_options: {num_splits: 4}\n")
    assert load_config(path, env={}).attention_options == {"num_splits": 4}
    env = {"HINGE_CACHE_OPTIONS": '{"checkpoint_interval": 64}'}
    assert load_config(env=env).cache_options == {"checkpoint_interval": 64}
    with pytest.raises(ConfigError, match="HINGE_CACHE_OPTIONS must be a JSON object"):
        load_config(env={"HINGE_CACHE_OPTIONS": "{interval: 64"})


def test_speculator_none_or_off_means_no_speculation():
    assert load_config(env={"HINGE_SPECULATOR": "none"}).speculator is None
    assert load_config(env={}, overrides={"speculator": "off"}).speculator is None
    assert load_config(env={}, overrides={"speculator": "eagle3"}).speculator == "eagle3"


def test_graphs_shorthand_sets_every_phase():
    graphs = load_config(env={}, overrides={"graphs": "off"}).graphs
    assert (graphs.prefill, graphs.decode, graphs.draft) == ("off", "off", "off")


def test_auto_dtype_resolves_per_device():
    assert load_config(env={}).resolved_dtype == "float32"
    assert load_config(env={}, overrides={"device": "cuda"}).resolved_dtype == "bfloat16"
    assert load_config(env={}, overrides={"device": "cuda", "dtype": "float16"}).resolved_dtype == "float16"


def test_invalid_values_name_the_field_its_source_and_the_allowed_values(tmp_path):
    path = tmp_path / "hinge.yaml"
    path.write_text("device: tpu\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={"HINGE_PAGE_SIZE": "zero"}, overrides={"graphs": {"decode": "always"}})
    msg = str(err.value)
    assert f"device (from {path}): Input should be 'auto', 'cpu' or 'cuda'; got 'tpu'" in msg
    assert "page_size (from HINGE_PAGE_SIZE): Input should be a valid integer" in msg
    assert "graphs.decode (from command line): Input should be 'auto', 'off' or 'require'; got 'always'" in msg


def test_out_of_range_values_state_the_range():
    with pytest.raises(ConfigError, match="mem_fraction_static .*less than or equal to 1"):
        load_config(env={}, overrides={"mem_fraction_static": 1.5})
    with pytest.raises(ConfigError, match="max_running_requests .*greater than or equal to 1"):
        load_config(env={"HINGE_MAX_RUNNING_REQUESTS": "0"})


def test_unknown_keys_are_rejected_with_a_suggestion(tmp_path):
    path = tmp_path / "hinge.yaml"
    path.write_text("pagesize: 32\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'pagesize' in .*hinge.yaml; did you "
                                          r"mean 'page_size'\?"):
        load_config(path, env={})
    with pytest.raises(ConfigError, match="unknown config key 'atention' in overrides"):
        load_config(env={}, overrides={"atention": "fa4"})


def test_yaml_problems_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml", env={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping of settings, got list"):
        load_config(bad, env={})


def test_unrelated_hinge_env_variables_are_ignored():
    assert load_config(env={"HINGE_TEST_MODEL_DIR": "/x", "PATH": "/bin"}) == EngineConfig()


def test_config_is_frozen():
    config = EngineConfig()
    with pytest.raises(ValueError):
        config.page_size = 32
