"""tools/train/install_default.py: checks, copy, and the model card's generated blocks."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from hinge.builtin.models import default_model_path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools" / "train"))
import install_default  # noqa: E402

SUMMARY = {
    "num_params": 4733528,
    "gated_delta_kernel": "fla",
    "device": "NVIDIA H200",
    "train_tokens": 2116650,
    "steps": 1200,
    "batch_size": 32,
    "seq_len": 512,
    "tokens_seen": 19660800,
    "train_seconds": 123.4,
    "final_train_loss": 1.2345,
    "final_val_loss": 1.5432,
    "checkpoint_val_loss": 1.5437,
    "checkpoint_val_ppl": 4.6823,
    "unigram_val_ppl": 812.55,
    "val_target_tokens": 182427,
    "checkpoint_bytes": 9_700_000,
    "completions": {"def fibonacci(n):": "\n    return n", "import os\n": "import sys\n"},
}


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    directory = tmp_path / "ckpt"
    shutil.copytree(default_model_path(), directory)
    return directory


def test_install_copies_every_checkpoint_file_into_the_target(tmp_path, checkpoint):
    target = tmp_path / "target"
    (checkpoint / "config.json").write_text('{"marker": 1}')
    size = install_default.install(checkpoint, target)
    for name in install_default.CHECKPOINT_FILES:
        assert (target / name).read_bytes() == (checkpoint / name).read_bytes(), name
    assert size == sum((checkpoint / n).stat().st_size for n in install_default.CHECKPOINT_FILES)


def test_install_refuses_a_checkpoint_with_another_tokenizer(tmp_path, checkpoint):
    target = tmp_path / "target"
    shutil.copytree(default_model_path(), target)
    (checkpoint / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ValueError, match="differs from the bundled"):
        install_default.install(checkpoint, target)
    assert (target / "tokenizer_config.json").read_bytes() == (
        default_model_path() / "tokenizer_config.json"
    ).read_bytes()


def test_install_refuses_missing_files_naming_them(tmp_path, checkpoint):
    (checkpoint / "generation_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="generation_config.json"):
        install_default.install(checkpoint, tmp_path / "target")


def test_card_gets_the_results_and_status_and_keeps_everything_else(tmp_path):
    card = tmp_path / "card.md"
    original = (REPO_ROOT / "docs" / "default-model.md").read_text()
    card.write_text(original)
    install_default.write_card(card, SUMMARY)
    text = card.read_text()
    for expected in ["**4.68**", "**812.55**", "1.2345", "1.5437", "NVIDIA H200, `fla`",
                     "def fibonacci(n):\n    return n", "Status: **trained**"]:  # fmt: skip
        assert expected in text, expected
    assert "_TBD" not in text
    outside = text.split("<!-- results:end -->")[1]
    assert outside == original.split("<!-- results:end -->")[1]
    install_default.write_card(card, SUMMARY)
    assert card.read_text() == text, "rewriting is idempotent"


def test_card_without_markers_is_refused(tmp_path):
    with pytest.raises(ValueError, match="results:begin"):
        install_default.replace_block("no markers here", "results", "x")
