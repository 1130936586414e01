"""Train the embedded default model: a tiny Qwen3.5-text hybrid on the stdlib corpus.

    python tools/train/train.py --out build/default_model --summary build/summary.json

Gated DeltaNet + full attention layers (3 linear : 1 full), tied embeddings, trained from a
fixed seed for a fixed number of steps with AdamW and a warmup + cosine schedule on packed
rows of the training split (bf16 autocast on CUDA). Writes a Hugging Face checkpoint (bf16
safetensors, tokenizer files, generation_config.json), then reloads it with transformers to
report validation perplexity, the unigram baseline and greedy completions.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evaluate  # noqa: E402
import token_corpus  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
ENDOFTEXT_ID, IM_END_ID = 0, 2
DEFAULT_TOKENIZER_DIR = token_corpus.DEFAULT_TOKENIZER.parent


def hybrid_config(vocab_size: int, tiny: bool = False):
    """The default model's architecture (``tiny``: a few-thousand-parameter body for CPU tests)."""
    from transformers import Qwen3_5TextConfig

    width = (
        dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
             head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
             linear_key_head_dim=16, linear_value_head_dim=16)
        if tiny
        else dict(hidden_size=256, intermediate_size=512, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, linear_num_key_heads=4,
                  linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=64)
    )  # fmt: skip
    return Qwen3_5TextConfig(
        vocab_size=vocab_size,
        num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        linear_conv_kernel_dim=4,
        max_position_embeddings=2048,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
        },
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ENDOFTEXT_ID,
        pad_token_id=ENDOFTEXT_ID,
        **width,
    )


def epoch_rows(stream: np.ndarray, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    """One epoch of training rows: the stream cut at a random offset, rows shuffled."""
    offset = int(rng.integers(0, seq_len))
    rows = token_corpus.rows(stream[offset:], seq_len)
    return rows[rng.permutation(len(rows))]


def batches(stream: np.ndarray, seq_len: int, batch_size: int, seed: int):
    """Endless seeded batches ``[batch_size, seq_len]``; every epoch is a new offset + shuffle."""
    rng = np.random.default_rng(seed)
    while True:
        rows = epoch_rows(stream, seq_len, rng)
        for start in range(0, len(rows) - batch_size + 1, batch_size):
            yield rows[start : start + batch_size]


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warmup to 1, then cosine decay to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model, lr: float, weight_decay: float) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for param in model.parameters():
        (decay if param.ndim == 2 else no_decay).append(param)  # matrices only; not conv/norm/A/dt
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]  # fmt: skip
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def save_checkpoint(model, out: Path, tokenizer_dir: Path) -> None:
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=None,
        eos_token_id=[ENDOFTEXT_ID, IM_END_ID],
        pad_token_id=ENDOFTEXT_ID,
        do_sample=False,
    )
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out / name)


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    p.add_argument("--summary", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--log", type=Path, default=None, help="append one JSON line per evaluation")
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="token corpus dir from token_corpus.py (default: tokenize this stdlib)",
    )
    p.add_argument("--tokenizer-dir", type=Path, default=DEFAULT_TOKENIZER_DIR)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA only)")
    p.add_argument("--tiny", action="store_true", help="tiny model for CPU smoke tests")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="abort after 20 steps if the projected training time exceeds this",
    )
    p.add_argument(
        "--shrink-to-budget",
        action="store_true",
        help="with --budget-s: train fewer steps instead of aborting",
    )
    p.add_argument("--max-val-tokens", type=int, default=None, help="truncate val (smoke tests)")
    return p.parse_args(argv)


def log_line(args, record: dict) -> None:
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in record.items()), flush=True)  # fmt: skip
    if args.log:
        args.log.parent.mkdir(parents=True, exist_ok=True)
        with args.log.open("a") as f:
            f.write(json.dumps(record) + "\n")


def check_budget(args, seconds_per_step: float) -> None:
    """After 30 steps: abort, or with ``--shrink-to-budget`` cut ``args.steps``, if too slow.

    The schedule reads ``args.steps`` at every step, so a cut made here (before warm-up ends)
    yields the same run as starting with that step count.
    """
    projected = seconds_per_step * args.steps
    if projected <= args.budget_s:
        return
    fitting = int(args.budget_s / seconds_per_step)
    if not args.shrink_to_budget or fitting <= max(args.warmup, 20):
        raise SystemExit(
            f"projected training time {projected:.0f} s for {args.steps} steps exceeds "
            f"--budget-s {args.budget_s:.0f} (gated delta kernel "
            f"{evaluate.gated_delta_backend()}); lower --steps (about {fitting} fit) or install fla"
        )
    print(f"NOTE: {seconds_per_step * 1e3:.0f} ms/step: {args.steps} steps would take "
          f"{projected:.0f} s > --budget-s {args.budget_s:.0f}; training {fitting} steps instead "
          f"(reproduce with --steps {fitting})", flush=True)  # fmt: skip
    args.steps = fitting


def train(args) -> dict:
    from transformers import Qwen3_5ForCausalLM

    corpus = (
        token_corpus.load(args.corpus)
        if args.corpus
        else token_corpus.tokenize_stdlib(args.tokenizer_dir / "tokenizer.json")
    )
    expected_sha = corpus.manifest.get("tokenizer_sha256")
    tokenizer_sha = token_corpus.file_sha256(args.tokenizer_dir / "tokenizer.json")
    if expected_sha is not None and expected_sha != tokenizer_sha:
        raise ValueError(
            f"token corpus {args.corpus} was tokenized with another tokenizer (sha256 "
            f"{expected_sha[:12]}, {args.tokenizer_dir}/tokenizer.json is {tokenizer_sha[:12]}); "
            "rewrite it with tools/train/token_corpus.py --tokenizer <that file>"
        )
    if args.max_val_tokens is not None:
        corpus.val = corpus.val[: args.max_val_tokens]
    vocab_size = corpus.manifest["vocab_size"]
    on_cuda = args.device.startswith("cuda")
    torch.manual_seed(args.seed)
    model = Qwen3_5ForCausalLM(hybrid_config(vocab_size, args.tiny)).to(args.device).train()
    num_params = sum(p.numel() for p in model.parameters())
    forward = torch.compile(model) if args.compile else model
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, args.warmup, args.steps, args.min_lr_ratio)
    )
    val_rows = token_corpus.rows(corpus.val, args.seq_len)
    print(
        f"model: Qwen3_5ForCausalLM {num_params / 1e6:.2f}M params, gated delta kernel "
        f"{evaluate.gated_delta_backend()}, device {args.device}; corpus: Python "
        f"{corpus.manifest['python_version']} stdlib, train {len(corpus.train)} tokens, "
        f"val {len(corpus.val)} tokens",
        flush=True,
    )

    data = batches(corpus.train, args.seq_len, args.batch_size, args.seed)
    started, window_loss, window_steps = time.perf_counter(), 0.0, 0
    record: dict = {}
    step = 0
    while step < args.steps:  # NOTE: a while loop, since check_budget may lower args.steps
        batch = torch.from_numpy(next(data).astype(np.int64)).to(args.device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_cuda):
            loss = forward(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        window_loss, window_steps = window_loss + loss.detach(), window_steps + 1
        if args.budget_s is not None and step in (9, 29):  # time steps 10-29: past warm-up
            if on_cuda:
                torch.cuda.synchronize()
            if step == 9:
                probe_started = time.perf_counter()
            else:
                check_budget(args, (time.perf_counter() - probe_started) / 20)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            val_loss = evaluate.mean_nll(model, val_rows, args.batch_size, args.device, on_cuda)
            elapsed = time.perf_counter() - started
            record = {
                "step": step + 1,
                "train_loss": float(window_loss) / window_steps,
                "val_loss": val_loss,
                "val_ppl": math.exp(val_loss),
                "lr": schedule.get_last_lr()[0],
                "elapsed_s": elapsed,
                "tokens_per_s": (step + 1) * args.batch_size * args.seq_len / elapsed,
            }
            log_line(args, record)
            window_loss, window_steps = 0.0, 0
        step += 1
    train_seconds = time.perf_counter() - started

    save_checkpoint(model, args.out, args.tokenizer_dir)
    measured = evaluate.evaluate_checkpoint(
        args.out, corpus, args.seq_len, args.batch_size, args.device, args.max_new_tokens
    )
    files = [p for p in args.out.iterdir() if p.is_file()]
    return {
        "num_params": num_params,
        "gated_delta_kernel": evaluate.gated_delta_backend(),
        "device": torch.cuda.get_device_name() if on_cuda else "cpu",
        "python_version": corpus.manifest["python_version"],
        "train_tokens": int(len(corpus.train)),
        "val_tokens": int(len(corpus.val)),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "tokens_seen": args.steps * args.batch_size * args.seq_len,
        "train_seconds": train_seconds,
        "final_train_loss": record["train_loss"],
        "final_val_loss": record["val_loss"],
        "final_val_ppl": record["val_ppl"],
        "checkpoint_bytes": sum(p.stat().st_size for p in files),
        **measured,
    }


def summary_table(summary: dict) -> str:
    rows = [
        ("parameters", f"{summary['num_params'] / 1e6:.2f}M"),
        ("gated delta kernel", summary["gated_delta_kernel"]),
        ("device", summary["device"]),
        (
            "steps x batch x seq",
            f"{summary['steps']} x {summary['batch_size']} x {summary['seq_len']}",
        ),
        ("tokens seen / train tokens", f"{summary['tokens_seen']} / {summary['train_tokens']}"),
        ("train time", f"{summary['train_seconds']:.1f} s"),
        ("final train loss", f"{summary['final_train_loss']:.4f}"),
        ("final val loss (training weights)", f"{summary['final_val_loss']:.4f}"),
        ("val loss (bf16 checkpoint)", f"{summary['checkpoint_val_loss']:.4f}"),
        ("val perplexity (bf16 checkpoint)", f"{summary['checkpoint_val_ppl']:.2f}"),
        ("unigram val perplexity", f"{summary['unigram_val_ppl']:.2f}"),
        ("checkpoint size", f"{summary['checkpoint_bytes'] / 2**20:.2f} MiB"),
    ]
    lines = ["| quantity | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    for prompt, completion in summary["completions"].items():
        lines.append(f"\n--- greedy: {prompt!r}\n{prompt}{completion}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    summary = train(args)
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    print(summary_table(summary))
    return summary


if __name__ == "__main__":
    main()
