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


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def dense_and_hybrid(request, tmp_path_factory) -> Path:
    """A seeded tiny Qwen3, then a tiny Qwen3.5 (gated DeltaNet and attention), each with a
    byte-level tokenizer: for tests that must hold on both kinds of model."""
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(f"both-{request.param}"), seed=2)
    write_byte_tokenizer(path)
    return path
