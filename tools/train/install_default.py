"""Install a trained checkpoint as hinge's embedded default and write its model card results.

    python tools/train/install_default.py --checkpoint $OUT/default_model --summary $OUT/summary.json

Checks the checkpoint (all five files, the same tokenizer as the bundled one, <= 12 MiB in all),
replaces the files in core/hinge/builtin/default_model/, and rewrites the marked status and
results blocks of docs/default-model.md from the run's summary.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET = REPO_ROOT / "core" / "hinge" / "builtin" / "default_model"
CARD = REPO_ROOT / "docs" / "default-model.md"
CHECKPOINT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
BUDGET_BYTES = 12 * 2**20


def check_checkpoint(checkpoint: Path, target: Path) -> int:
    """Raise naming the problem if ``checkpoint`` cannot replace ``target``; return its size."""
    missing = [name for name in CHECKPOINT_FILES if not (checkpoint / name).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint {checkpoint} lacks {', '.join(missing)}")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (target / name).is_file() and (checkpoint / name).read_bytes() != (
            target / name
        ).read_bytes():
            raise ValueError(
                f"{checkpoint / name} differs from the bundled {target / name}; train with the "
                "bundled tokenizer (tools/train/train.py --tokenizer-dir) or replace both"
            )
    size = sum((checkpoint / name).stat().st_size for name in CHECKPOINT_FILES)
    if size > BUDGET_BYTES:
        raise ValueError(f"checkpoint is {size} bytes; the bundled budget is {BUDGET_BYTES}")
    return size


def install(checkpoint: Path, target: Path = TARGET) -> int:
    size = check_checkpoint(checkpoint, target)
    target.mkdir(parents=True, exist_ok=True)
    for name in CHECKPOINT_FILES:
        shutil.copyfile(checkpoint / name, target / name)
    return size


def render_status(summary: dict) -> str:
    return (
        f"> Status: **trained** ({summary['steps']} steps on {summary['device']}, gated-delta "
        f"kernel `{summary['gated_delta_kernel']}`). The seeded random model below stays "
        "available for tests."
    )


def render_results(summary: dict) -> str:
    rows = [
        ("GPU, gated-delta kernel", f"{summary['device']}, `{summary['gated_delta_kernel']}`"),
        ("parameters", f"{summary['num_params']:,}"),
        ("steps x batch x sequence", f"{summary['steps']} x {summary['batch_size']} x {summary['seq_len']}"),
        ("tokens seen (training split)", f"{summary['tokens_seen']:,} ({summary['train_tokens']:,})"),
        ("training time", f"{summary['train_seconds']:.0f} s"),
        ("final train loss (mean of the last evaluation interval)", f"{summary['final_train_loss']:.4f}"),
        ("final validation loss, training weights (bf16 autocast)", f"{summary['final_val_loss']:.4f}"),
        ("validation loss, shipped bf16 checkpoint (float32 compute)", f"{summary['checkpoint_val_loss']:.4f}"),
        ("**validation perplexity**, shipped checkpoint", f"**{summary['checkpoint_val_ppl']:.2f}**"),
        ("**unigram baseline perplexity** (same tokenizer and targets)", f"**{summary['unigram_val_ppl']:.2f}**"),
        ("validation target tokens", f"{summary['val_target_tokens']:,}"),
        ("checkpoint size", f"{summary['checkpoint_bytes'] / 2**20:.2f} MiB"),
    ]  # fmt: skip
    lines = ["| quantity | value |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines += ["", "Greedy completions of the shipped checkpoint (prompt, then the model's text):"]
    for prompt, completion in summary["completions"].items():
        lines += ["", f"`{prompt!r}`", "", "```python", prompt + completion, "```"]
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name}:begin[^>]*-->\n)(.*?)(\n<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no '<!-- {name}:begin -->' ... '<!-- {name}:end -->' block in the card")
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def write_card(card: Path, summary: dict) -> None:
    text = card.read_text(encoding="utf-8")
    text = replace_block(text, "status", render_status(summary))
    text = replace_block(text, "results", render_results(summary))
    card.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--summary", type=Path, required=True)
    parser.add_argument("--target", type=Path, default=TARGET)
    parser.add_argument("--card", type=Path, default=CARD)
    args = parser.parse_args(argv)
    summary = json.loads(args.summary.read_text())
    size = install(args.checkpoint, args.target)
    write_card(args.card, summary)
    print(f"installed {args.checkpoint} -> {args.target} ({size / 2**20:.2f} MiB); "
          f"wrote results into {args.card}")  # fmt: skip


if __name__ == "__main__":
    main()
