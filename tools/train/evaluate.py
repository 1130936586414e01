"""Validation perplexity, unigram baseline and greedy completions of a checkpoint.

    python tools/train/evaluate.py --model core/hinge/builtin/default_model [--corpus DIR]

Loads the checkpoint with transformers (weights upcast to float32), packs the validation split
into rows of ``--seq-len`` tokens and reports the mean next-token loss over every predicted
position, its perplexity, and the perplexity of the same tokenizer's unigram model (fitted on
the training split, add-one smoothing) on exactly the same target tokens.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import token_corpus  # noqa: E402

PROMPTS = ("def fibonacci(n):", "import os\n", "class Stack:")


def gated_delta_backend() -> str:
    """Which gated-delta-rule kernel transformers' Qwen3.5 layers use here: ``fla`` or ``torch``."""
    try:
        module = importlib.import_module("fla.ops.gated_delta_rule")
        return "fla" if hasattr(module, "chunk_gated_delta_rule") else "torch"
    except Exception:
        return "torch"


@torch.no_grad()
def mean_nll(model, rows: np.ndarray, batch_size: int, device: str, autocast: bool) -> float:
    """Mean next-token negative log-likelihood (nats) over ``rows[:, 1:]``."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(rows), batch_size):
        batch = torch.from_numpy(rows[start : start + batch_size].astype(np.int64)).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=batch).logits
        nll = F.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]),
            batch[:, 1:].reshape(-1),
            reduction="sum",
        )
        total += float(nll)
        count += batch[:, 1:].numel()
    model.train(was_training)
    return total / count


@torch.no_grad()
def greedy_completions(model, tokenizer, device: str, max_new_tokens: int) -> dict[str, str]:
    model.eval()
    completions = {}
    for prompt in PROMPTS:
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids.to(device)
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
        )
        completions[prompt] = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False)
    return completions


def evaluate_checkpoint(
    model_dir: Path,
    corpus: token_corpus.TokenCorpus,
    seq_len: int,
    batch_size: int,
    device: str,
    max_new_tokens: int,
) -> dict:
    """Reload ``model_dir`` with transformers and measure it; returns a JSON-able dict."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    val_rows = token_corpus.rows(corpus.val, seq_len)
    val_loss = mean_nll(model, val_rows, batch_size, device, autocast=False)
    unigram = token_corpus.unigram_perplexity(
        corpus.train, val_rows[:, 1:].reshape(-1), model.config.vocab_size
    )
    return {
        "checkpoint_val_loss": val_loss,
        "checkpoint_val_ppl": math.exp(val_loss),
        "unigram_val_ppl": unigram,
        "val_target_tokens": int(val_rows[:, 1:].size),
        "completions": greedy_completions(model, tokenizer, device, max_new_tokens),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="token corpus dir (default: "
        "tokenize this machine's stdlib with the model's tokenizer)",
    )
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    corpus = (
        token_corpus.load(args.corpus)
        if args.corpus
        else token_corpus.tokenize_stdlib(args.model / "tokenizer.json")
    )
    result = evaluate_checkpoint(
        args.model, corpus, args.seq_len, args.batch_size, args.device, args.max_new_tokens
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
