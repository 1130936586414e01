from __future__ import annotations

from pathlib import Path

import pytest
from hinge.testing.checkpoints import make_tiny_checkpoint


def write_byte_tokenizer(path: Path) -> None:
    """A 256-token byte-level tokenizer (token id = byte value) matching the tiny vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]  # GPT-2 bytes_to_unicode
    extra = iter(range(256, 512))
    vocab = {chr(b) if b in printable else chr(next(extra)): b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory) -> Path:
    """Seeded tiny Qwen3 (vocab 256, no eos) with a byte-level tokenizer."""
    path = make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("engine-qwen3"), seed=11)
    write_byte_tokenizer(path)
    return path
