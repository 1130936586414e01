"""load_format="dummy": real shapes from config.json alone, seeded random weights."""

from __future__ import annotations

import shutil

import pytest
import torch

from hinge import LLM, SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer


@pytest.fixture(scope="module")
def config_only(tmp_path_factory):
    path = make_tiny_checkpoint("qwen3_moe", tmp_path_factory.mktemp("dummy"))
    write_byte_tokenizer(path)
    (path / "model.safetensors").unlink()
    return path


def test_dummy_weights_need_no_checkpoint_and_are_seeded(config_only):
    params = SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True, logprobs=True)
    runs = []
    for _ in range(2):
        with LLM(str(config_only), load_format="dummy") as llm:
            weights = [p for p in llm.engine.model.parameters() if p.is_floating_point()]
            assert all(torch.isfinite(w).all() and w.abs().max() > 0 for w in weights)
            runs.append(llm.generate([[5, 6, 7, 8]], params)[0])
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) == 6
    assert all(lp == lp and lp > -1e9 for lp in runs[0].logprobs), "finite logprobs"


def test_without_dummy_a_missing_checkpoint_is_named(config_only, tmp_path):
    path = shutil.copytree(config_only, tmp_path / "copy")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        LLM(str(path))
