"""The byte tokenizer written next to tiny checkpoints: token id = byte value, within the vocab."""

from __future__ import annotations

from tokenizers import Tokenizer

from hinge.testing.checkpoints import write_byte_tokenizer


def test_byte_tokenizer_maps_each_byte_to_its_value_and_decodes_back(tmp_path):
    write_byte_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    text = "héllo, wörld\n\t!"
    assert tok.encode(text).ids == list(text.encode())
    assert tok.decode(list(text.encode())) == text
    assert tok.get_vocab_size() == 256


def test_a_smaller_vocab_keeps_the_first_byte_ids_unchanged(tmp_path):
    full, small = tmp_path / "full", tmp_path / "small"
    full.mkdir(), small.mkdir()
    write_byte_tokenizer(full)
    write_byte_tokenizer(small, vocab_size=96)
    full_vocab = Tokenizer.from_file(str(full / "tokenizer.json")).get_vocab()
    small_vocab = Tokenizer.from_file(str(small / "tokenizer.json")).get_vocab()
    assert small_vocab == {t: i for t, i in full_vocab.items() if i < 96}
    assert sorted(small_vocab.values()) == list(range(96))
