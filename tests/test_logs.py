"""Logging set-up and the start-up banner (hinge.logs)."""

from __future__ import annotations

import io
import logging
import math
import re

import pytest
import torch

from hinge.config import load_config
from hinge.logs import configure_logging, resolve_level


def test_flag_beats_hinge_log_level_beats_info():
    assert resolve_level("debug", {"HINGE_LOG_LEVEL": "error"}) == "debug"
    assert resolve_level(None, {"HINGE_LOG_LEVEL": "Warning"}) == "warning"
    assert resolve_level(None, {"HINGE_LOG_LEVEL": ""}) == "info"
    assert resolve_level(None, {}) == "info"


def test_an_unknown_level_names_its_source_and_the_levels():
    with pytest.raises(ValueError, match=r"HINGE_LOG_LEVEL must be one of debug, info, warning, "
                                         r"error; got 'loud'"):
        resolve_level(None, {"HINGE_LOG_LEVEL": "loud"})


@pytest.fixture
def hinge_logger():
    root = logging.getLogger("hinge")
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_records_go_to_the_stream_with_time_level_and_logger_from_the_level_up(hinge_logger):
    stream = io.StringIO()
    configure_logging("info", stream)
    logging.getLogger("hinge.engine.x").debug("hidden")
    logging.getLogger("hinge.engine.x").info("shown %d", 7)
    assert re.fullmatch(r"\d\d-\d\d \d\d:\d\d:\d\d INFO hinge\.engine\.x: shown 7\n", stream.getvalue())


def test_configuring_again_replaces_the_handler(hinge_logger):
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", first)
    configure_logging("debug", second)
    logging.getLogger("hinge.x").debug("once")
    assert first.getvalue() == "" and second.getvalue().count("once") == 1


def test_an_engine_logs_the_banner_once_with_its_numbers(caplog, tmp_path):
    from hinge.builtin import random_model_path
    from hinge.engine.engine import Engine

    before = torch.get_num_threads()
    config = load_config(env={}, overrides={
        "model": str(random_model_path(tmp_path)), "max_model_len": 100, "page_size": 16,
        "kv_cache_bytes": 2**20, "max_running_requests": 8, "cpu_threads": 1})
    caplog.set_level(logging.INFO, logger="hinge.startup")
    engine = Engine(config, progress=False)
    try:
        stats = engine.stats()
        pages = stats.kv_pages_total
    finally:
        engine.close()
        torch.set_num_threads(before)
    lines = [r.getMessage() for r in caplog.records if r.name == "hinge.startup"]
    assert lines[0].startswith("hinge 0.1.0 (torch ")
    assert lines[1].startswith(f"model: {tmp_path} (Qwen3ForCausalLM, weights ")
    assert lines[1].endswith("MiB), max_model_len 100")
    assert "plan: device: cpu, dtype: float32" in lines
    assert "plan: attention: torch (plugin hinge, distribution hinge-llm 0.1.0)" in lines
    assert any(line.startswith("plan: decode graph: off, because cpu: CUDA graphs need device cuda")
               for line in lines)
    assert f"KV cache: {pages * 16} tokens ({pages} pages of 16)" in lines
    fit = pages // math.ceil(100 / 16)
    assert (f"concurrency: max_running_requests 8, chunked_prefill_size 512; {fit} requests of "
            "max_model_len 100 fit in the KV cache") in lines
    assert lines[-2] == "gc: start-up heap not frozen (gc_freeze auto on cpu)"
    assert lines[-1] == "torch threads: 1 (cpu_threads: set in the config / --cpu-threads)"
    assert len(lines) == len(set(lines)), "a banner line was logged twice"
