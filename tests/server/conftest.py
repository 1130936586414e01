"""Fixtures: the real server (``hinge serve``) as a subprocess on 127.0.0.1 at a free port,
serving the embedded tiny seeded Qwen3, in deterministic mode, with an API key."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_helpers import ServerProcess


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The embedded default: a tiny seeded Qwen3 (2 layers, hidden 64) with its tokenizer.
    NOTE: ``random_model_path()`` writes an equivalent model but costs ~20 s of transformers
    import and save on the 2-core machine; this one is already on disk."""
    from hinge.builtin import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def server(model_dir, tmp_path_factory):
    proc = ServerProcess(model_dir, tmp_path_factory.mktemp("server-logs"))
    yield proc
    code = proc.stop()
    assert code == 0, f"server exited with {code}:\n{proc.log()[-3000:]}"


@pytest.fixture(scope="session")
def llm(model_dir):
    """The offline oracle: the same checkpoint and engine settings as the server."""
    from hinge import LLM
    from server_helpers import MAX_MODEL_LEN

    with LLM(str(model_dir), deterministic=True, kv_cache_bytes=32 * 2**20,
             max_model_len=MAX_MODEL_LEN) as llm:
        yield llm
