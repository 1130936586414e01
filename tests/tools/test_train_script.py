"""tools/train: token corpus, schedule, batching and a CPU smoke run of train.py."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from tokenizers import Tokenizer

from hinge.builtin.models import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "train"))
import stdlib_corpus  # noqa: E402
import token_corpus  # noqa: E402
import train  # noqa: E402


def test_unigram_perplexity_matches_a_straightforward_recompute():
    rng = np.random.default_rng(0)
    train_ids = rng.integers(0, 50, size=2000).astype(np.uint16)
    targets = rng.integers(0, 64, size=300).astype(np.uint16)  # includes ids never seen in train
    fast = token_corpus.unigram_perplexity(train_ids, targets, vocab_size=64)
    slow = token_corpus.unigram_perplexity_reference(train_ids.tolist(), targets.tolist(), 64)
    assert fast == pytest.approx(slow, rel=1e-12)


def test_documents_are_packed_back_to_back_each_followed_by_eos():
    assert token_corpus.concat_with_eos([[5, 6], [], [7]], eos_id=0) == [5, 6, 0, 0, 7, 0]


def test_rows_cut_a_stream_and_drop_the_tail():
    rows = token_corpus.rows(np.arange(10), 4)
    assert rows.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="shorter than one row"):
        token_corpus.rows(np.arange(3), 4)


def test_lr_warms_up_linearly_then_decays_by_cosine_to_the_floor():
    factors = [train.lr_factor(s, warmup=10, total=110, min_ratio=0.1) for s in range(111)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert factors[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(factors[9:], factors[10:], strict=False))


def test_batches_are_seeded_contiguous_slices_of_the_stream():
    stream = np.arange(1000)
    gen, gen_again = train.batches(stream, 16, 4, seed=3), train.batches(stream, 16, 4, seed=3)
    first = [next(gen) for _ in range(30)]  # 30 batches of 4 rows: > 1 epoch of 62 rows
    again = [next(gen_again) for _ in range(30)]
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    for batch in first:
        assert batch.shape == (4, 16)
        assert (np.diff(batch, axis=1) == 1).all(), "each row is a contiguous window"
    other = next(train.batches(stream, 16, 4, seed=4))
    assert not np.array_equal(first[0], other)


def test_default_architecture_is_a_3_to_1_hybrid_of_about_4m_params_within_budget():
    from transformers import Qwen3_5ForCausalLM

    config = train.hybrid_config(8192)
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert config.tie_word_embeddings and config.max_position_embeddings == 2048
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    num_params = sum(p.numel() for p in model.parameters())
    tokenizer_bytes = (default_model_path() / "tokenizer.json").stat().st_size
    assert 3e6 < num_params < 5.5e6, num_params
    assert 2 * num_params + tokenizer_bytes < 12 * 2**20


def test_optimizer_decays_matrices_only():
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM(train.hybrid_config(64, tiny=True))
    decay, no_decay = train.make_optimizer(model, lr=1e-3, weight_decay=0.1).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"])
    assert all(p.ndim != 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def _tiny_corpus(directory: Path) -> token_corpus.TokenCorpus:
    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    streams = {"train": [], "val": []}
    for source in stdlib_corpus.iter_files():
        stream = streams[source.split]
        if len(stream) < {"train": 3000, "val": 300}[source.split]:
            stream.extend(tokenizer.encode(source.text).ids + [0])
    corpus = token_corpus.TokenCorpus(
        np.asarray(streams["train"][:3000], dtype=np.uint16),
        np.asarray(streams["val"][:256], dtype=np.uint16),
        {"python_version": "test", "vocab_size": tokenizer.get_vocab_size()},
    )
    token_corpus.save(corpus, directory)
    return corpus


@pytest.mark.slow
def test_tiny_training_run_writes_a_checkpoint_transformers_loads_and_measures(tmp_path):
    from transformers import AutoModelForCausalLM, GenerationConfig

    corpus = _tiny_corpus(tmp_path / "corpus")
    out = tmp_path / "ckpt"
    argv = ["--tiny", "--steps", "3", "--seq-len", "32", "--batch-size", "4", "--eval-every", "3",
            "--max-new-tokens", "3", "--device", "cpu", "--corpus", str(tmp_path / "corpus"),
            "--out", str(out), "--summary", str(tmp_path / "summary.json")]  # fmt: skip
    summary = train.main(argv)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    for name in train.TOKENIZER_FILES:
        assert (out / name).read_bytes() == (default_model_path() / name).read_bytes()
    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert set(GenerationConfig.from_pretrained(out).eos_token_id) == {0, 2}
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    assert set(model.config.layer_types) == {"linear_attention", "full_attention"}

    # oracle: plain float64 log-softmax over the same validation rows
    rows = torch.from_numpy(token_corpus.rows(corpus.val, 32).astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=rows).logits.double()
    nll = -F.log_softmax(logits[:, :-1], dim=-1).gather(-1, rows[:, 1:, None]).mean()
    assert summary["checkpoint_val_loss"] == pytest.approx(float(nll), rel=1e-5)
    assert summary["checkpoint_val_ppl"] == pytest.approx(math.exp(float(nll)), rel=1e-5)
    unigram = token_corpus.unigram_perplexity_reference(
        corpus.train.tolist(), rows[:, 1:].reshape(-1).tolist(), model.config.vocab_size
    )
    assert summary["unigram_val_ppl"] == pytest.approx(unigram, rel=1e-9)
    assert set(summary["completions"]) == {"def fibonacci(n):", "import os\n", "class Stack:"}
    assert summary["steps"] == 3 and summary["num_params"] == model.num_parameters()


def _budget_args(**overrides):
    args = train.parse_args(["--out", "unused", "--steps", "1000", "--budget-s", "100"])
    vars(args).update(overrides)
    return args


def test_budget_check_keeps_steps_that_fit():
    args = _budget_args()
    train.check_budget(args, seconds_per_step=0.05)
    assert args.steps == 1000


def test_budget_check_aborts_naming_the_steps_that_fit():
    with pytest.raises(SystemExit, match="about 500 fit"):
        train.check_budget(_budget_args(), seconds_per_step=0.2)


def test_budget_check_shrinks_steps_when_asked():
    args = _budget_args(shrink_to_budget=True)
    train.check_budget(args, seconds_per_step=0.2)
    assert args.steps == 500
    with pytest.raises(SystemExit):  # fewer steps than the warm-up would be meaningless
        train.check_budget(_budget_args(shrink_to_budget=True), seconds_per_step=2.0)


def test_token_corpus_saves_and_loads_both_splits_and_names_missing_files(tmp_path):
    corpus = token_corpus.TokenCorpus(
        np.arange(10, dtype=np.uint16), np.arange(3, dtype=np.uint16), {"vocab_size": 16}
    )
    token_corpus.save(corpus, tmp_path / "c")
    loaded = token_corpus.load(tmp_path / "c")
    assert np.array_equal(loaded.train, corpus.train) and loaded.train.dtype == np.uint16
    assert np.array_equal(loaded.val, corpus.val) and loaded.manifest == corpus.manifest
    (tmp_path / "c" / "val.npy").unlink()
    with pytest.raises(FileNotFoundError, match="lacks val.npy"):
        token_corpus.load(tmp_path / "c")
