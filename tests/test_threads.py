"""The CPU thread choice (hinge.threads): the rule, its precedence, and that an engine applies it."""

from __future__ import annotations

import pytest
import torch

from hinge.config import ConfigError, load_config
from hinge.threads import MAX_AUTO_THREADS, choose_cpu_threads


@pytest.mark.parametrize("cores, expected", [
    (1, 1), (2, 1), (3, 2), (4, 3), (8, 7), (9, 8), (10, 8), (64, 8),
])
def test_auto_keeps_one_core_for_host_threads_and_caps_the_team(cores, expected):
    choice = choose_cpu_threads(None, {}, cores)
    assert (choice.count, choice.source) == (expected, "auto")
    assert f"{cores} usable core" in choice.reason


def test_the_cap_is_eight_threads():
    assert MAX_AUTO_THREADS == 8
    assert "capped at 8" in choose_cpu_threads(None, {}, 32).reason


def test_configured_count_beats_omp_num_threads_and_auto():
    choice = choose_cpu_threads(3, {"OMP_NUM_THREADS": "6"}, 16)
    assert (choice.count, choice.source) == (3, "cpu_threads")


def test_an_explicit_omp_num_threads_beats_auto():
    assert choose_cpu_threads(None, {"OMP_NUM_THREADS": "2"}, 2).count == 2
    assert choose_cpu_threads(None, {"OMP_NUM_THREADS": " 4,2"}, 16).count == 4  # nested list: outer


@pytest.mark.parametrize("value", ["", "0", "-1", "many"])
def test_an_empty_or_invalid_omp_num_threads_counts_as_unset(value):
    choice = choose_cpu_threads(None, {"OMP_NUM_THREADS": value}, 4)
    assert (choice.count, choice.source) == (3, "auto")


def test_auto_on_cuda_leaves_torch_alone_but_an_explicit_count_applies():
    assert choose_cpu_threads(None, {}, 16, device="cuda").count is None
    assert choose_cpu_threads(None, {"OMP_NUM_THREADS": "5"}, 16, device="cuda").count == 5
    assert choose_cpu_threads(2, {}, 16, device="cuda").count == 2


def test_cpu_threads_precedence_is_cli_then_env_then_yaml(tmp_path):
    path = tmp_path / "hinge.yaml"
    path.write_text("cpu_threads: 2\n")
    assert load_config(path, env={}).cpu_threads == 2
    assert load_config(path, env={"HINGE_CPU_THREADS": "3"}).cpu_threads == 3
    assert load_config(path, env={"HINGE_CPU_THREADS": "auto"}).cpu_threads is None
    assert load_config(path, env={"HINGE_CPU_THREADS": "3"}, overrides={"cpu_threads": 4}).cpu_threads == 4
    assert load_config(path, env={}, overrides={"cpu_threads": "auto"}).cpu_threads is None
    assert load_config(env={}).cpu_threads is None


def test_cpu_threads_below_one_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"cpu_threads \(from HINGE_CPU_THREADS\)"):
        load_config(env={"HINGE_CPU_THREADS": "0"})


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_an_engine_sets_torchs_thread_count_and_keeps_its_choice(restore_threads, tmp_path):
    from hinge.builtin import random_model_path
    from hinge.engine.engine import Engine

    target = 1 if restore_threads != 1 else 2
    config = load_config(env={}, overrides={"model": str(random_model_path(tmp_path)),
                                            "cpu_threads": target})
    engine = Engine(config, progress=False)
    try:
        assert torch.get_num_threads() == target
        assert (engine.cpu_threads.count, engine.cpu_threads.source) == (target, "cpu_threads")
    finally:
        engine.close()
