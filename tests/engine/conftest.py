from __future__ import annotations

from pathlib import Path

import pytest

from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory) -> Path:
    """Seeded tiny Qwen3 (vocab 256, no eos) with a byte-level tokenizer."""
    path = make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("engine-qwen3"), seed=11)
    write_byte_tokenizer(path)
    return path
