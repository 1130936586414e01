"""Fixtures: the real server (``hinge serve``) as a subprocess on 127.0.0.1 at a free port,
serving a tiny seeded random Qwen3, in deterministic mode, with an API key."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_helpers import ServerProcess


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """A tiny seeded random Qwen3 (2 layers, hidden 64) with the bundled tokenizer.
    NOTE: not the embedded default, which is meant to be replaced by a larger trained model."""
    from hinge.builtin import random_model_path

    return random_model_path(tmp_path_factory.mktemp("server-model"))


@pytest.fixture(scope="session")
def server(model_dir, tmp_path_factory):
    """Serves the model as ``tiny-qwen3`` and ``tiny`` (test_openai_api.SERVED_MODEL_NAMES)."""
    proc = ServerProcess(model_dir, tmp_path_factory.mktemp("server-logs"),
                         "--served-model-name", "tiny-qwen3", "tiny")
    yield proc
    code = proc.stop()
    assert code == 0, f"server exited with {code}:\n{proc.log()[-3000:]}"


@pytest.fixture(scope="session")
def llm(model_dir):
    """The offline oracle: the same checkpoint and engine settings as the server."""
    from server_helpers import MAX_MODEL_LEN

    from hinge import LLM

    with LLM(str(model_dir), deterministic=True, kv_cache_bytes=32 * 2**20,
             max_model_len=MAX_MODEL_LEN, cache="none") as llm:
        yield llm
