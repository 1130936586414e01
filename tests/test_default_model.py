"""The embedded default model: bundled tokenizer and checkpoint (core/hinge/builtin/default_model)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from hinge.builtin.models import (
    ENDOFTEXT_ID,
    IM_END_ID,
    IM_START_ID,
    default_model_path,
    random_model_path,
)

TRAIN_DIR = Path(__file__).resolve().parents[1] / "tools" / "train"
sys.path.insert(0, str(TRAIN_DIR))
import stdlib_corpus  # noqa: E402

BUDGET_BYTES = 12 * 1024 * 1024
TRAINED_ON = (3, 11, 7)  # the Python whose stdlib the bundled tokenizer was trained on


@pytest.fixture(scope="module")
def held_out_files() -> list[stdlib_corpus.SourceFile]:
    files = list(stdlib_corpus.iter_files("val"))
    assert len(files) >= 10, (
        f"only {len(files)} validation files under {stdlib_corpus.stdlib_root()}"
    )
    return files


@pytest.fixture(scope="module")
def bundled_tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))


@pytest.fixture(scope="module")
def hf_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_path())


def test_bundled_model_files_fit_the_12_mb_budget():
    files = [p for p in default_model_path().iterdir() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    } <= {p.name for p in files}
    assert total <= BUDGET_BYTES, f"bundled model is {total} bytes, budget {BUDGET_BYTES}"


def test_bundled_tokenizer_round_trips_held_out_python_source_exactly(
    bundled_tokenizer, held_out_files
):
    for f in held_out_files:
        ids = bundled_tokenizer.encode(f.text).ids
        assert bundled_tokenizer.decode(ids, skip_special_tokens=False) == f.text, f.rel_path


def test_bundled_tokenizer_compresses_held_out_source_better_than_bytes(
    bundled_tokenizer, held_out_files
):
    text = "".join(f.text for f in held_out_files)
    num_tokens = sum(len(bundled_tokenizer.encode(f.text).ids) for f in held_out_files)
    assert len(text.encode("utf-8")) / num_tokens > 3.0, "a trained BPE packs > 3 bytes/token"


def test_transformers_tokenizer_matches_bundled_tokenizer_on_held_out_files(
    bundled_tokenizer, hf_tokenizer, held_out_files
):
    for f in held_out_files:
        ids = bundled_tokenizer.encode(f.text).ids
        hf_ids = hf_tokenizer(f.text, add_special_tokens=False)["input_ids"]
        assert hf_ids == ids, f.rel_path
        assert hf_tokenizer.decode(hf_ids) == f.text, f.rel_path


def test_special_tokens_have_the_ids_hinge_relies_on(bundled_tokenizer, hf_tokenizer):
    for token, token_id in [
        ("<|endoftext|>", ENDOFTEXT_ID),
        ("<|im_start|>", IM_START_ID),
        ("<|im_end|>", IM_END_ID),
    ]:
        assert bundled_tokenizer.token_to_id(token) == token_id
        assert bundled_tokenizer.encode(f"x{token}y").ids[1] == token_id, "parsed as one token"
    assert hf_tokenizer.eos_token_id == ENDOFTEXT_ID
    assert hf_tokenizer.bos_token_id is None


def test_chat_template_renders_chatml_turns_and_generation_prompt(hf_tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert hf_tokenizer.apply_chat_template(messages, tokenize=False) == expected
    with_prompt = hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert with_prompt == expected + "<|im_start|>assistant\n"


def test_chat_template_renders_in_a_sandboxed_jinja_environment():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    config = json.loads((default_model_path() / "tokenizer_config.json").read_text())
    template = ImmutableSandboxedEnvironment().from_string(config["chat_template"])
    rendered = template.render(
        messages=[{"role": "user", "content": "x"}], add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_bundled_checkpoint_loads_with_transformers_and_stops_on_both_eos_tokens():
    from transformers import AutoModelForCausalLM, GenerationConfig

    path = default_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert model.config.tie_word_embeddings
    assert model.config.max_position_embeddings == 2048
    assert (
        model.get_input_embeddings().weight.data_ptr()
        == model.get_output_embeddings().weight.data_ptr()
    )
    assert set(GenerationConfig.from_pretrained(path).eos_token_id) == {ENDOFTEXT_ID, IM_END_ID}
    with torch.no_grad():
        logits = model(torch.tensor([[5, 6, 7]])).logits
    assert logits.shape == (1, 3, model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_random_model_is_reproducible_from_its_seed(tmp_path):
    first = load_file(random_model_path(tmp_path / "a") / "model.safetensors")
    second = load_file(random_model_path(tmp_path / "b") / "model.safetensors")
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name
    assert all(t.dtype == torch.float32 for t in first.values())


def test_random_model_path_without_directory_is_written_once_per_process():
    first = random_model_path()
    assert random_model_path() == first
    assert (first / "tokenizer.json").read_bytes() == (
        default_model_path() / "tokenizer.json"
    ).read_bytes()


@pytest.mark.skipif(
    sys.version_info[:3] != TRAINED_ON,
    reason=f"the bundled tokenizer was trained on Python {TRAINED_ON}'s stdlib",
)
def test_tokenizer_script_reproduces_the_bundled_tokenizer_byte_for_byte(tmp_path):
    import tokenizer as tokenizer_script

    tokenizer_script.write_tokenizer(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (default_model_path() / name).read_bytes(), name


def test_hinge_default_model_matches_transformers_on_held_out_source(held_out_files):
    """LLM() with no model: prompt logprobs (hence perplexity) and greedy tokens equal HF's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hinge import LLM, SamplingParams

    path = default_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = [
        tokenizer(f.text, add_special_tokens=False).input_ids[:96] for f in held_out_files[:2]
    ]
    params = SamplingParams(max_new_tokens=8, temperature=0, prompt_logprobs_start=1)
    with LLM() as llm:
        results = llm.generate(prompts, params)
    for ids, result in zip(prompts, results, strict=True):
        with torch.no_grad():
            logits = hf(torch.tensor([ids])).logits[0].double()
            greedy = hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
        ref = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
        ours = torch.tensor(result.prompt_logprobs, dtype=torch.float64)
        assert ours.shape == ref.shape
        assert (ours - ref).abs().max() < 1e-3, (ours - ref).abs().max()
        assert math.exp(-ours.mean()) == pytest.approx(math.exp(-ref.mean()), rel=1e-4)
        assert result.token_ids == greedy[0, len(ids) :].tolist()
