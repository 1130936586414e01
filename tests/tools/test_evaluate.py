"""tools/train/evaluate.py + hinge_eval.py: hinge and transformers agree on the bundled model.

The rows are built here from held-out stdlib files and the bundled tokenizer (no saved token
corpus needed): on Python 3.11.7 they are the first rows of the validation split that the model
card's perplexities are computed on; on another Python they are still held-out Python source.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from hinge.builtin.models import default_model_path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools" / "train"))
import evaluate  # noqa: E402
import hinge_eval  # noqa: E402
import stdlib_corpus  # noqa: E402
import token_corpus  # noqa: E402

SEQ_LEN = 512
NUM_ROWS = 4
SAVED_CORPUS = REPO_ROOT / "build" / "stdlib_corpus"


def held_out_stream(min_tokens: int) -> np.ndarray:
    """Held-out files in path order, tokenized and packed exactly as token_corpus does."""
    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    eos_id = tokenizer.token_to_id(token_corpus.EOS_TOKEN)
    docs: list[list[int]] = []
    for source in stdlib_corpus.iter_files("val"):
        docs.append(tokenizer.encode(source.text, add_special_tokens=False).ids)
        if sum(len(d) + 1 for d in docs) >= min_tokens:
            break
    stream = np.asarray(token_corpus.concat_with_eos(docs, eos_id), dtype=np.uint16)
    if len(stream) < min_tokens:
        pytest.skip(f"held-out stdlib files give {len(stream)} tokens, need {min_tokens}")
    return stream


@pytest.fixture(scope="module")
def val_rows() -> np.ndarray:
    return token_corpus.rows(held_out_stream(NUM_ROWS * SEQ_LEN), SEQ_LEN)[:NUM_ROWS]


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def llm():
    with hinge_eval.open_llm(default_model_path()) as engine:
        yield engine


def reference_row_nll_sums(model, rows: np.ndarray) -> np.ndarray:
    """Oracle: transformers' float32 logits, log-softmax and target gather in float64."""
    sums = []
    with torch.no_grad():
        for row in rows.astype(np.int64):
            ids = torch.from_numpy(row)[None]
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
            sums.append(-float(logp[torch.arange(len(row) - 1), ids[0, 1:]].sum()))
    return np.asarray(sums)


def test_hinge_and_transformers_mean_nll_agree_on_held_out_validation_rows(
    llm, hf_model, val_rows
):
    ours = hinge_eval.row_nll_sums(llm, val_rows, batch_size=2) / (SEQ_LEN - 1)
    ref = reference_row_nll_sums(hf_model, val_rows) / (SEQ_LEN - 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-4)
    assert ours.mean() == pytest.approx(ref.mean(), rel=1e-4)
    assert math.exp(ours.mean()) < 200, "a trained model is far below the unigram baseline (885)"


def test_hinge_greedy_completions_are_transformers_greedy_tokens(llm, hf_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    ours = hinge_eval.greedy_token_ids(llm, evaluate.PROMPTS, max_new_tokens=24)
    ref = evaluate.greedy_token_ids(hf_model, tokenizer, "cpu", max_new_tokens=24)
    assert ours == ref
    assert all(len(ids) > 0 for ids in ours.values())


def test_rows_shorter_than_two_tokens_are_refused_naming_the_shape(llm):
    with pytest.raises(ValueError, match=r"seq_len >= 2.*\(3, 1\)"):
        hinge_eval.row_nll_sums(llm, np.zeros((3, 1), dtype=np.uint16))


def test_unknown_engine_is_refused_naming_the_choices(val_rows):
    corpus = token_corpus.TokenCorpus(val_rows.reshape(-1), val_rows.reshape(-1), {})
    with pytest.raises(ValueError, match=r"'vllm'.*\['hinge', 'transformers'\]"):
        evaluate.evaluate_engines(default_model_path(), corpus, ["vllm"])


def test_cli_engine_both_prints_both_losses_their_difference_and_the_unigram_baseline(
    tmp_path, val_rows, capsys
):
    stream = val_rows[:2].reshape(-1)
    corpus = token_corpus.TokenCorpus(stream, stream, {"vocab_size": 8192})
    token_corpus.save(corpus, tmp_path / "corpus")
    evaluate.main([
        "--model", str(default_model_path()), "--corpus", str(tmp_path / "corpus"),
        "--engine", "both", "--max-rows", "1", "--max-new-tokens", "4", "--batch-size", "1",
    ])
    result = json.loads(capsys.readouterr().out)
    assert result["val_rows"] == 1 and result["val_target_tokens"] == SEQ_LEN - 1
    hf, ours = result["transformers"], result["hinge"]
    assert ours["val_loss"] == pytest.approx(hf["val_loss"], rel=1e-4)
    assert result["val_loss_rel_diff"] == pytest.approx(
        abs(ours["val_loss"] - hf["val_loss"]) / hf["val_loss"]
    )
    assert result["val_loss_rel_diff"] < 1e-4
    assert result["greedy_completions_equal"] is True
    assert set(ours["completions"]) == set(evaluate.PROMPTS)
    expected_unigram = token_corpus.unigram_perplexity_reference(
        stream.tolist(), val_rows[0, 1:].tolist(), 8192
    )
    assert result["unigram_val_ppl"] == pytest.approx(expected_unigram, rel=1e-9)


@pytest.mark.skipif(
    not (SAVED_CORPUS / "manifest.json").is_file(),
    reason=f"no saved token corpus at {SAVED_CORPUS} (python tools/train/token_corpus.py --out)",
)
def test_rows_built_here_are_the_leading_rows_of_the_saved_validation_split(val_rows):
    saved = token_corpus.load(SAVED_CORPUS)
    if saved.manifest["python_version"] != stdlib_corpus.python_version():
        pytest.skip(f"saved corpus is of Python {saved.manifest['python_version']}")
    saved_rows = token_corpus.rows(saved.val, SEQ_LEN)[:NUM_ROWS]
    np.testing.assert_array_equal(val_rows, saved_rows)
