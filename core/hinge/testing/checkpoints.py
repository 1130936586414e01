"""Tiny seeded random Hugging Face checkpoints for oracle tests (written by ``save_pretrained``).

``make_tiny_checkpoint("qwen3", tmp_path)`` builds the transformers model of that family from a
small config, seeds its weights (float32, CPU; norm weights perturbed away from 1 so a wrong
norm cannot hide), and saves config.json + safetensors. Add a family with one ``ARCHS`` entry.
``write_byte_tokenizer(path)`` adds a byte-level tokenizer (token id = byte value) that fits
the tiny vocab, for tests that go through text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hinge.builtin.models import seeded_float32

COMMON: dict[str, Any] = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    initializer_range=0.3,
    eos_token_id=None,
    bos_token_id=None,
    pad_token_id=None,
)


def _llama(overrides: dict):
    from transformers import LlamaConfig, LlamaForCausalLM

    rope = {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
    }
    cfg = LlamaConfig(**{**COMMON, "rope_parameters": rope, "tie_word_embeddings": False, **overrides})
    return LlamaForCausalLM(cfg)


def _qwen3(overrides: dict):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**{**COMMON, "tie_word_embeddings": True, **overrides})
    return Qwen3ForCausalLM(cfg)


def _qwen3_moe(overrides: dict):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    base = dict(
        num_hidden_layers=3, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], tie_word_embeddings=False,
    )
    cfg = Qwen3MoeConfig(**{**COMMON, **base, **overrides})
    return Qwen3MoeForCausalLM(cfg)


HYBRID_LINEAR: dict[str, Any] = dict(
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    num_hidden_layers=4,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
)


def _qwen3_5(overrides: dict):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(**{**COMMON, **HYBRID_LINEAR, "tie_word_embeddings": False, **overrides})
    return Qwen3_5ForCausalLM(cfg)


def _qwen3_next(overrides: dict):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
               shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[1],
               norm_topk_prob=True, tie_word_embeddings=False)
    cfg = Qwen3NextConfig(**{**COMMON, **HYBRID_LINEAR, **moe, **overrides})
    return Qwen3NextForCausalLM(cfg)


def _lfm2(overrides: dict):
    from transformers import Lfm2Config, Lfm2ForCausalLM

    base = dict(num_hidden_layers=4, conv_L_cache=3, layer_types=["conv", "full_attention", "conv", "conv"],
                block_multiple_of=16, conv_bias=False, tie_word_embeddings=True,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    common = {k: v for k, v in COMMON.items() if k != "rms_norm_eps"}
    return Lfm2ForCausalLM(Lfm2Config(**{**common, **base, **overrides}))


ARCHS: dict[str, Callable[[dict], Any]] = {
    "llama": _llama,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_5": _qwen3_5,
    "qwen3_next": _qwen3_next,
    "lfm2": _lfm2,
}


def make_tiny_checkpoint(
    arch: str, path: str | Path, *, seed: int = 0, max_shard_size: str | None = None, **overrides: Any
) -> Path:
    """Write a seeded random tiny ``arch`` checkpoint to ``path`` and return ``path``.

    :param overrides: config fields to change (e.g. ``num_hidden_layers=3``).
    :param max_shard_size: e.g. ``"40KB"`` to get a sharded checkpoint with an index.
    """
    import torch

    if arch not in ARCHS:
        raise ValueError(f"unknown tiny checkpoint arch {arch!r}; known: {', '.join(sorted(ARCHS))}")
    path = Path(path)
    model = seeded_float32(lambda: ARCHS[arch](overrides), seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.2 * torch.randn(param.shape, generator=gen))
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **kwargs)
    return path


def write_byte_tokenizer(path: str | Path, vocab_size: int = 256) -> None:
    """Write ``tokenizer.json``: one token per byte for bytes ``0..vocab_size-1`` (token id = byte)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]  # GPT-2 bytes_to_unicode
    extra = iter(range(256, 512))
    chars = {b: chr(b) if b in printable else chr(next(extra)) for b in range(256)}
    tok = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(vocab_size)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(Path(path) / "tokenizer.json"))


def tiny_checkpoints(make_dir: Callable[[str], Path], *, seed: int = 0,
                     **overrides: Any) -> Callable[[str], Path]:
    """``get(arch)``: a seeded tiny checkpoint of ``arch`` with the byte-level tokenizer, written
    once into ``make_dir(arch)`` (e.g. ``tmp_path_factory.mktemp``) and reused afterwards;
    ``overrides`` change config fields of every arch (e.g. ``max_position_embeddings=4096``)."""
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = make_tiny_checkpoint(arch, make_dir(arch), seed=seed, **overrides)
            write_byte_tokenizer(made[arch])
        return made[arch]

    return get
