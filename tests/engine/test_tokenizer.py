"""hinge's Tokenizer against transformers' own tokenizer loaded from the same local files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer as RawTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer

from hinge.engine.tokenizer import Tokenizer, TokenizerError

CORPUS = [
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The quick brown fox jumps over the lazy dog.",
    "Héllo wörld, ça va? Déjà vu, naïve café.",
    "日本語のテキストと中文文本。",
    "emoji: 🎉🚀 and Ελληνικά and русский текст",
    "import os\nimport sys\nprint(os.getcwd())",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]
CHAT_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if tools %}tools: {{ tools | tojson }}\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXTS = CORPUS + ["unseen wörds ☃ with 🎉 <|im_end|> inside", "", "  leading spaces", "ünïcödé"]


def build_tokenizer_dir(path: Path, *, config_extra: dict | None = None,
                        generation_config: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    raw = RawTokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    raw.train_from_iterator(CORPUS * 3, trainer=trainer)
    raw.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "chat_template": CHAT_TEMPLATE, **(config_extra or {})}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    if generation_config is not None:
        (path / "generation_config.json").write_text(json.dumps(generation_config))
    return path


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer_dir(tmp_path_factory.mktemp("tok"),
                               generation_config={"eos_token_id": [3, 0]})


@pytest.fixture(scope="module")
def pair(tok_dir: Path) -> tuple[Tokenizer, object]:
    return Tokenizer.from_pretrained(tok_dir), AutoTokenizer.from_pretrained(str(tok_dir))


class TestMatchesTransformers:
    @pytest.mark.parametrize("add_special", [True, False])
    def test_encode_equals_transformers_ids(self, pair, add_special: bool) -> None:
        ours, hf = pair
        for text in TEXTS:
            assert ours.encode(text, add_special_tokens=add_special) == \
                hf.encode(text, add_special_tokens=add_special), text

    @pytest.mark.parametrize("skip", [True, False])
    def test_decode_equals_transformers_text(self, pair, skip: bool) -> None:
        ours, hf = pair
        for text in TEXTS:
            ids = hf.encode(text)
            assert ours.decode(ids, skip_special_tokens=skip) == \
                hf.decode(ids, skip_special_tokens=skip), text

    def test_decode_of_random_ids_equals_transformers(self, pair) -> None:
        ours, hf = pair
        rng = random.Random(0)
        for _ in range(50):
            ids = [rng.randrange(ours.vocab_size) for _ in range(rng.randint(1, 12))]
            assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)

    def test_vocab_size_counts_added_tokens_like_len_of_transformers(self, pair) -> None:
        ours, hf = pair
        assert ours.vocab_size == len(hf)

    @pytest.mark.parametrize("add_generation_prompt", [True, False])
    def test_chat_template_renders_and_tokenizes_like_transformers(
            self, pair, add_generation_prompt: bool) -> None:
        ours, hf = pair
        messages = [{"role": "user", "content": "Grüß dich 🎉"},
                    {"role": "assistant", "content": "hello", "tool_calls": None},
                    {"role": "user", "content": "def f(x):"}]
        tools = [{"type": "function", "function": {"name": "météo", "parameters": {}}}]
        for kwargs in ({}, {"tools": tools}):
            text = ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                            tokenize=False, **kwargs)
            assert text == hf.apply_chat_template(
                messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs)
            assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                            **kwargs) == \
                hf.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                       tokenize=True, return_dict=False, **kwargs)
        assert "<s>" in text and "météo" in text

    def test_explicit_add_bos_token_prepends_bos_like_transformers(self, tmp_path: Path) -> None:
        """transformers 5.24's generic backend drops the key when loading, so set it on its side."""
        path = build_tokenizer_dir(tmp_path, config_extra={"add_bos_token": True})
        ours, hf = Tokenizer.from_pretrained(path), AutoTokenizer.from_pretrained(str(path))
        hf.add_bos_token = True
        for text in TEXTS:
            assert ours.encode(text) == hf.encode(text)
            assert ours.encode(text)[0] == ours.bos_token_id
            assert ours.encode(text, add_special_tokens=False) == \
                hf.encode(text, add_special_tokens=False)

    def test_chat_template_saved_by_transformers_is_read_from_its_file(
            self, pair, tmp_path: Path) -> None:
        _, hf = pair
        hf.save_pretrained(str(tmp_path))
        ours = Tokenizer.from_pretrained(tmp_path)
        messages = [{"role": "user", "content": "hi"}]
        assert ours.apply_chat_template(messages, tokenize=False) == \
            hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        for text in TEXTS:
            assert ours.encode(text) == hf.encode(text)


class TestTokenizerFiles:
    def test_eos_ids_merge_tokenizer_eos_with_generation_config_list(self, pair) -> None:
        ours, _ = pair
        im_end = ours.token_to_id("<|im_end|>")
        assert ours.eos_token_ids == [im_end, 3, 0]

    def test_generation_config_single_eos_int_is_accepted(self, tmp_path: Path) -> None:
        path = build_tokenizer_dir(tmp_path, generation_config={"eos_token_id": 0})
        ours = Tokenizer.from_pretrained(path)
        assert ours.eos_token_ids == [ours.token_to_id("<|im_end|>"), 0]

    def test_missing_directory_is_named(self, tmp_path: Path) -> None:
        with pytest.raises(TokenizerError, match="nope"):
            Tokenizer.from_pretrained(tmp_path / "nope")

    def test_missing_tokenizer_json_is_named(self, tmp_path: Path) -> None:
        with pytest.raises(TokenizerError, match="tokenizer.json not found"):
            Tokenizer.from_pretrained(tmp_path)

    def test_corrupt_tokenizer_json_is_named(self, tmp_path: Path) -> None:
        (tmp_path / "tokenizer.json").write_text("{not json")
        with pytest.raises(TokenizerError, match="tokenizer.json is not a valid tokenizer file"):
            Tokenizer.from_pretrained(tmp_path)

    def test_corrupt_tokenizer_config_is_named(self, tmp_path: Path) -> None:
        build_tokenizer_dir(tmp_path)
        (tmp_path / "tokenizer_config.json").write_text("[1, 2")
        with pytest.raises(TokenizerError, match="tokenizer_config.json is not valid JSON"):
            Tokenizer.from_pretrained(tmp_path)


class TestChatTemplateSandbox:
    def test_raise_exception_in_template_becomes_value_error(self, pair) -> None:
        ours, _ = pair
        with pytest.raises(ValueError, match="unknown role tool"):
            ours.apply_chat_template([{"role": "tool", "content": "x"}])

    def test_template_cannot_reach_python_internals(self, pair) -> None:
        ours, _ = pair
        evil = Tokenizer(ours.backend, chat_template="{{ ''.__class__.__mro__[1].__subclasses__() }}")
        with pytest.raises(ValueError, match="chat template"):
            evil.apply_chat_template([{"role": "user", "content": "x"}])

    def test_strftime_now_and_generation_tag_render(self, pair) -> None:
        ours, _ = pair
        tok = Tokenizer(ours.backend, chat_template=(
            "{% generation %}{{ strftime_now('%Y') }}{% endgeneration %}"))
        year = tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
        assert len(year) == 4 and year.isdigit()

    def test_missing_template_says_to_send_a_plain_prompt(self, pair) -> None:
        ours, _ = pair
        with pytest.raises(ValueError, match="no chat template.*plain prompt"):
            Tokenizer(ours.backend).apply_chat_template([{"role": "user", "content": "x"}])


class TestDecodeStream:
    def test_deltas_join_to_full_decode_and_never_split_a_character(self, pair) -> None:
        ours, _ = pair
        held_back = 0
        for text in TEXTS:
            ids = ours.encode(text, add_special_tokens=False)
            stream = ours.decode_stream()
            deltas = [stream.step(i) for i in ids]
            held_back += deltas.count("")
            assert all("\ufffd" not in d for d in deltas), deltas
            assert "".join(deltas) + stream.flush() == ours.decode(ids)
            assert ours.decode(ids, skip_special_tokens=False) == text
        assert held_back > 0, "no token ever split a character: the test text proves nothing"

    def test_byte_tokens_of_one_character_yield_it_once_complete(self, pair) -> None:
        ours, _ = pair
        ids = [ours.token_to_id(_char_of(b)) for b in "🎉".encode()]
        stream = ours.decode_stream()
        assert [stream.step(i) for i in ids] == ["", "", "", "🎉"]

    def test_prompt_context_and_multi_token_steps_match_full_decode(self, pair) -> None:
        ours, _ = pair
        prompt = ours.encode("Héllo wörld, ")
        out = ours.encode("日本語 🎉 ça va <|im_end|> ok", add_special_tokens=False)
        stream = ours.decode_stream(prompt)
        text = "".join(stream.step(out[i:i + 3]) for i in range(0, len(out), 3)) + stream.flush()
        assert text == ours.decode(out) == stream.text

    def test_flush_returns_a_dangling_partial_character_as_replacement(self, pair) -> None:
        ours, _ = pair
        stream = ours.decode_stream()
        assert stream.step(ours.token_to_id(_char_of("é".encode()[0]))) == ""
        assert stream.flush() == "\ufffd"


def _byte_level_chars() -> list[str]:
    # GPT-2's byte -> printable-char table (the ByteLevel pre-tokenizer's alphabet)
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def _char_of(byte: int) -> str:
    return _byte_level_chars()[byte]
