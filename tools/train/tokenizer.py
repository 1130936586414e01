"""Train the default model's byte-level BPE tokenizer on the stdlib training split.

    python tools/train/tokenizer.py --out core/hinge/builtin/default_model

Writes tokenizer.json and tokenizer_config.json (with a ChatML-style chat template) that
``transformers.AutoTokenizer.from_pretrained`` loads. Deterministic: the same Python version
and tokenizers version give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stdlib_corpus  # noqa: E402

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DEFAULT_VOCAB_SIZE = 8192


def build_tokenizer(texts: list[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    # NOTE: no normalizer: any normalisation would break exact round trips of source text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 2048,
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def write_tokenizer(out: Path, vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    texts = [f.text for f in stdlib_corpus.iter_files("train")]
    tokenizer = build_tokenizer(texts, vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"), pretty=False)
    config_text = json.dumps(tokenizer_config(), indent=2, sort_keys=True) + "\n"
    (out / "tokenizer_config.json").write_text(config_text, encoding="utf-8")
    return tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    args = parser.parse_args(argv)
    tokenizer = write_tokenizer(args.out, args.vocab_size)
    print(
        f"tokenizer: vocab {tokenizer.get_vocab_size()} trained on the stdlib of Python "
        f"{stdlib_corpus.python_version()} -> {args.out}"
    )


if __name__ == "__main__":
    main()
