"""The models shipped with hinge: the embedded default and a seeded random model for tests.

``default_model_path()`` is the checkpoint used when no model is given (``LLM()``, ``hinge
generate``, ``hinge serve``, ``hinge bench``). ``random_model_path()`` writes a tiny Qwen3 with
seeded random weights (float32) and the bundled tokenizer, for tests that want a model whose
output is noise but reproducible. ``tools/train/seeded_model.py`` writes the same model.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hinge import default_model_path

SEED = 1234
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Special token ids fixed by tools/train/tokenizer.py (special tokens are added first).
ENDOFTEXT_ID, IM_START_ID, IM_END_ID = 0, 1, 2

_random_model_dir: Path | None = None


def seeded_float32(build: Callable[[], Any], seed: int) -> Any:
    """``build()`` (a transformers model) with weights from ``torch.manual_seed(seed)`` and
    transformers' own initialisation, in float32 and eval mode: the same seed and versions give
    the same weights. Shared by the seeded random model and ``hinge.testing.checkpoints``."""
    import torch

    torch.manual_seed(seed)
    return build().to(torch.float32).eval()


def seeded_qwen3_config(vocab_size: int):
    """The config of the seeded random model: a 2-layer Qwen3 with tied embeddings."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        # NOTE: wider than the usual 0.02 so random logits are not near ties (greedy stays stable).
        initializer_range=0.1,
        bos_token_id=None,
        eos_token_id=ENDOFTEXT_ID,
        pad_token_id=ENDOFTEXT_ID,
        dtype="float32",
    )


def write_seeded_model(out: Path, tokenizer_dir: Path, seed: int = SEED) -> Path:
    """Write the seeded random Qwen3 (float32 safetensors) plus tokenizer files into ``out``."""
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_dir.resolve() != out.resolve():
        for name in TOKENIZER_FILES:
            shutil.copyfile(tokenizer_dir / name, out / name)
    vocab_size = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json")).vocab_size
    model = seeded_float32(lambda: Qwen3ForCausalLM(seeded_qwen3_config(vocab_size)), seed)
    model.generation_config = GenerationConfig(
        bos_token_id=None,
        eos_token_id=[ENDOFTEXT_ID, IM_END_ID],
        pad_token_id=ENDOFTEXT_ID,
        do_sample=False,
    )
    model.save_pretrained(out, safe_serialization=True)
    return out


def random_model_path(directory: Path | None = None) -> Path:
    """A seeded random Qwen3 checkpoint with the bundled tokenizer.

    With ``directory`` the model is written there; without, it is written once per process into
    a temporary directory that is reused by later calls.
    """
    global _random_model_dir
    tokenizer_dir = default_model_path()
    if directory is not None:
        return write_seeded_model(Path(directory), tokenizer_dir)
    if _random_model_dir is None or not (_random_model_dir / "config.json").is_file():
        target = Path(tempfile.mkdtemp(prefix="hinge-random-model-"))
        _random_model_dir = write_seeded_model(target, tokenizer_dir)
    return _random_model_dir
