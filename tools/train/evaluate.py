"""Validation perplexity, unigram baseline and greedy completions of a checkpoint.

    python tools/train/evaluate.py --model core/hinge/builtin/default_model \
        [--corpus DIR] [--engine transformers|hinge|both] [--max-rows N]

Packs the validation split into rows of ``--seq-len`` tokens and reports the mean next-token
loss over every predicted position and its perplexity, computed by transformers (the checkpoint
loaded with weights upcast to float32, on ``--device``, CPU by default), by hinge (``hinge.LLM``
in float32, prompt logprobs of the same rows; ``hinge_eval.py``), or both (then also their
relative difference and whether the greedy completions are the same tokens), plus the perplexity
of the same tokenizer's unigram model (fitted on the training split, add-one smoothing) on
exactly the same target tokens.
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
def greedy_token_ids(
    model, tokenizer, device: str, max_new_tokens: int, prompts=PROMPTS
) -> dict[str, list[int]]:
    """transformers' greedy continuation (token ids, eos included if produced) of each prompt."""
    model.eval()
    completions = {}
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids.to(device)
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
        )
        completions[prompt] = out[0, ids.shape[1] :].tolist()
    return completions


def greedy_completions(model, tokenizer, device: str, max_new_tokens: int) -> dict[str, str]:
    ids = greedy_token_ids(model, tokenizer, device, max_new_tokens)
    return {p: tokenizer.decode(t, skip_special_tokens=False) for p, t in ids.items()}


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


def transformers_side(
    model_dir: Path, rows: np.ndarray, batch_size: int, device: str, max_new_tokens: int
) -> dict:
    """transformers, weights upcast to float32, no autocast: loss on ``rows`` and greedy ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    loss = mean_nll(model, rows, batch_size, device, autocast=False)
    ids = greedy_token_ids(model, tokenizer, device, max_new_tokens)
    return {
        "val_loss": loss,
        "val_ppl": math.exp(loss),
        "completion_ids": ids,
        "completions": {p: tokenizer.decode(t, skip_special_tokens=False) for p, t in ids.items()},
    }


def hinge_side(
    model_dir: Path, rows: np.ndarray, batch_size: int, device: str, max_new_tokens: int
) -> dict:
    """hinge (``hinge.LLM``, float32): loss on ``rows`` from prompt logprobs, and greedy ids."""
    import hinge_eval

    with hinge_eval.open_llm(model_dir, device=device, dtype="float32") as llm:
        loss = hinge_eval.mean_nll(llm, rows, batch_size)
        ids = hinge_eval.greedy_token_ids(llm, PROMPTS, max_new_tokens)
        decode = llm.tokenizer.decode
        return {
            "val_loss": loss,
            "val_ppl": math.exp(loss),
            "completion_ids": ids,
            "completions": {p: decode(t, skip_special_tokens=False) for p, t in ids.items()},
        }


ENGINES = {"transformers": transformers_side, "hinge": hinge_side}


def evaluate_engines(
    model_dir: Path,
    corpus: token_corpus.TokenCorpus,
    engines: list[str],
    *,
    seq_len: int = 512,
    batch_size: int = 16,
    device: str = "cpu",
    max_new_tokens: int = 48,
    max_rows: int | None = None,
) -> dict:
    """Measure ``model_dir`` with each engine in ``engines`` on the same validation rows."""
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        raise ValueError(f"unknown engine(s) {unknown}; choose from {sorted(ENGINES)}")
    rows = token_corpus.rows(corpus.val, seq_len)[:max_rows]
    vocab_size = int(corpus.manifest.get("vocab_size", int(corpus.train.max()) + 1))
    result: dict = {
        "val_rows": int(len(rows)),
        "seq_len": seq_len,
        "val_target_tokens": int(rows[:, 1:].size),
        "unigram_val_ppl": token_corpus.unigram_perplexity(
            corpus.train, rows[:, 1:].reshape(-1), vocab_size
        ),
        "device": device,
        "dtype": "float32",
    }
    for engine in engines:
        result[engine] = ENGINES[engine](model_dir, rows, batch_size, device, max_new_tokens)
    if len(engines) == 2:
        hf, ours = result["transformers"], result["hinge"]
        result["val_loss_rel_diff"] = abs(ours["val_loss"] - hf["val_loss"]) / hf["val_loss"]
        result["val_ppl_rel_diff"] = abs(ours["val_ppl"] - hf["val_ppl"]) / hf["val_ppl"]
        result["greedy_completions_equal"] = hf["completion_ids"] == ours["completion_ids"]
    return result


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
    parser.add_argument(
        "--engine",
        choices=["transformers", "hinge", "both"],
        default="transformers",
        help="who computes the loss and completions (default: transformers)",
    )
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument(
        "--max-rows", type=int, default=None, help="only the first N validation rows (default: all)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda; float32 either way")
    args = parser.parse_args(argv)
    corpus = (
        token_corpus.load(args.corpus)
        if args.corpus
        else token_corpus.tokenize_stdlib(args.model / "tokenizer.json")
    )
    engines = ["transformers", "hinge"] if args.engine == "both" else [args.engine]
    result = evaluate_engines(
        args.model,
        corpus,
        engines,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        device=args.device,
        max_new_tokens=args.max_new_tokens,
        max_rows=args.max_rows,
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
