"""The stdlib corpus as token ids: tokenize, save/load, and the unigram baseline.

A token corpus directory holds ``train.npy`` and ``val.npy`` (uint16 streams in which every
document is followed by ``<|endoftext|>``) and ``manifest.json`` (Python version, tokenizer
hash, files per split). ``python tools/train/token_corpus.py --out build/stdlib_corpus`` writes
one from this machine's stdlib, so a machine with another Python can train on the same data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stdlib_corpus  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOKENIZER = REPO_ROOT / "core" / "hinge" / "builtin" / "default_model" / "tokenizer.json"
EOS_TOKEN = "<|endoftext|>"


@dataclass
class TokenCorpus:
    """Token streams of both splits plus where they came from."""

    train: np.ndarray
    val: np.ndarray
    manifest: dict


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tokenize_stdlib(tokenizer_path: Path = DEFAULT_TOKENIZER) -> TokenCorpus:
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    files: dict[str, list[str]] = {"train": [], "val": []}
    docs: dict[str, list[list[int]]] = {"train": [], "val": []}
    for source in stdlib_corpus.iter_files():
        # NOTE: special-token strings in a text are always parsed as special tokens; no selected
        # stdlib file contains one (tests/tools/test_stdlib_corpus.py checks it).
        docs[source.split].append(tokenizer.encode(source.text, add_special_tokens=False).ids)
        files[source.split].append(source.rel_path)
    streams = {split: concat_with_eos(split_docs, eos_id) for split, split_docs in docs.items()}
    manifest = {
        "python_version": stdlib_corpus.python_version(),
        "stdlib_root": str(stdlib_corpus.stdlib_root()),
        "tokenizer_sha256": file_sha256(tokenizer_path),
        "eos_id": eos_id,
        "vocab_size": tokenizer.get_vocab_size(),
        "num_tokens": {split: len(stream) for split, stream in streams.items()},
        "files": files,
    }
    assert tokenizer.get_vocab_size() <= 2**16, "uint16 streams need vocab <= 65536"
    return TokenCorpus(
        np.asarray(streams["train"], dtype=np.uint16),
        np.asarray(streams["val"], dtype=np.uint16),
        manifest,
    )


def save(corpus: TokenCorpus, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "train.npy", corpus.train)
    np.save(out / "val.npy", corpus.val)
    (out / "manifest.json").write_text(json.dumps(corpus.manifest, indent=1) + "\n")


def load(directory: Path) -> TokenCorpus:
    missing = [
        n for n in ("train.npy", "val.npy", "manifest.json") if not (directory / n).is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"token corpus {directory} lacks {', '.join(missing)}; write it with "
            f"`python tools/train/token_corpus.py --out {directory}`"
        )
    manifest = json.loads((directory / "manifest.json").read_text())
    return TokenCorpus(np.load(directory / "train.npy"), np.load(directory / "val.npy"), manifest)


def concat_with_eos(docs: Iterable[list[int]], eos_id: int) -> list[int]:
    """Pack documents back to back, each followed by ``eos_id``."""
    stream: list[int] = []
    for doc in docs:
        stream.extend(doc)
        stream.append(eos_id)
    return stream


def rows(stream: np.ndarray, seq_len: int) -> np.ndarray:
    """Cut a packed stream into ``[num_rows, seq_len]`` (the partial tail is dropped)."""
    num_rows = len(stream) // seq_len
    if num_rows == 0:
        raise ValueError(f"stream of {len(stream)} tokens is shorter than one row of {seq_len}")
    return stream[: num_rows * seq_len].reshape(num_rows, seq_len)


def unigram_perplexity(train: np.ndarray, targets: np.ndarray, vocab_size: int) -> float:
    """Perplexity on ``targets`` of the add-one-smoothed unigram model fitted on ``train``."""
    counts = np.bincount(train.astype(np.int64), minlength=vocab_size).astype(np.float64) + 1.0
    log_probs = np.log(counts / counts.sum())
    return math.exp(-float(log_probs[targets.astype(np.int64)].mean()))


def unigram_perplexity_reference(train: list[int], targets: list[int], vocab_size: int) -> float:
    """Straightforward recompute of :func:`unigram_perplexity`, for tests."""
    counts = Counter(train)
    total = len(train) + vocab_size
    nll = [-math.log((counts[t] + 1) / total) for t in targets]
    return math.exp(sum(nll) / len(nll))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    args = parser.parse_args(argv)
    corpus = tokenize_stdlib(args.tokenizer)
    save(corpus, args.out)
    counts = corpus.manifest["num_tokens"]
    print(
        f"stdlib of Python {corpus.manifest['python_version']}: train {counts['train']} tokens "
        f"({len(corpus.manifest['files']['train'])} files), val {counts['val']} tokens "
        f"({len(corpus.manifest['files']['val'])} files) -> {args.out}"
    )


if __name__ == "__main__":
    main()
