"""The benchmark's workload: seeded synthetic token prompts (ordinary tokens of the tokenizer, or
random ids below a random-weight model's vocabulary), or text prompts from a file."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hinge.engine.tokenizer import Tokenizer


def parse_len_range(text: str) -> tuple[int, int]:
    """``"16,128"`` -> ``(16, 128)``; raises ValueError naming ``--input-len-range``."""
    try:
        lo, hi = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--input-len-range must be MIN,MAX (e.g. 16,128), got {text!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"--input-len-range needs 1 <= MIN <= MAX, got {text!r}")
    return lo, hi


def synthetic_prompts(tokenizer: Tokenizer, num: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    """``num`` prompts of random ordinary (non-special) token ids, lengths uniform in [lo, hi]."""
    special = set(tokenizer.backend.get_added_tokens_decoder())
    ordinary = [i for i in range(tokenizer.vocab_size) if i not in special]
    rng = random.Random(seed)
    return [[rng.choice(ordinary) for _ in range(rng.randint(lo, hi))] for _ in range(num)]


def random_id_prompts(vocab_size: int, num: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    """``num`` prompts of ids uniform in ``[0, vocab_size)``, lengths uniform in [lo, hi]: the
    workload of a random-weight model, whose vocabulary the tokenizer does not cover."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(rng.randint(lo, hi))] for _ in range(num)]


def file_prompts(path: str, tokenizer: Tokenizer) -> list[list[int]]:
    """Token ids of the prompts in ``path``: one per line, or ``.jsonl`` lines with ``prompt``."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--prompts-file {path} does not exist")
    lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if file.suffix == ".jsonl":
        try:
            lines = [json.loads(line)["prompt"] for line in lines]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: every line must be a JSON object with 'prompt': {exc}") from None
    if not lines:
        raise ValueError(f"--prompts-file {path} holds no prompts")
    return [tokenizer.encode(line) for line in lines]
