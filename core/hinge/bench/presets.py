"""Model configurations for ``hinge bench --random-weights --arch A --size S``.

Each preset is the ``config.json`` of a published checkpoint (the fields that shape the model;
transformers fills the rest with its defaults), so a benchmark runs the real shapes without the
weights. Sources, field by field:

- ``qwen3`` 0.6b, 1.7b, 4b, 8b, 14b, 32b and ``qwen3_moe`` 30b-a3b: the ``config.json`` of
  Qwen/Qwen3-<size> (and Qwen/Qwen3-30B-A3B) as published: vocabulary 151,936, head_dim 128,
  rope theta 1e6, 40,960 positions, bos/eos 151643/151645; embeddings tied up to 4B.
- ``qwen3_5`` 9b: no published file was at hand. transformers' ``Qwen3_5TextConfig`` defaults,
  which its docstring calls the "Qwen3.5-9B style configuration" (hidden 4096, 32 layers,
  MLP 12288, full attention 16 query / 4 key-value heads of 256 with rotary on a quarter of
  each head, gated DeltaNet 16 key / 32 value heads of 128, conv kernel 4, every fourth layer
  full attention, vocabulary 248,320, untied), with rope theta 1e7 and 262,144 positions
  taken from the published Qwen3.5-family ``text_config`` (Qwen3.6-27B).
- ``qwen3_5`` 27b: the published Qwen3.6-27B ``text_config`` (the same architecture,
  ``Qwen3_5ForConditionalGeneration``), its language model alone.
- ``llama`` 3b and 8b: the published ``config.json`` of meta-llama/Llama-3.2-3B and
  Llama-3.1-8B (llama3 rope scaling, vocabulary 128,256).
- ``tiny`` (every arch): a few-layer model of the same family for CPU tests; its vocabulary
  (12,000) is larger than the embedded tokenizer's 8,192, like the real ones.
"""

from __future__ import annotations

import copy
from typing import Any

_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
          "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 40960,
          "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "attention_bias": False,
          "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"}
_QWEN3_MOE = {**_QWEN3, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
              "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True}
_QWEN3_5 = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
            "hidden_act": "silu", "rms_norm_eps": 1e-6, "attention_bias": False,
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "partial_rotary_factor": 0.25, "tie_word_embeddings": False, "vocab_size": 248320,
            "max_position_embeddings": 262144, "bos_token_id": 248044, "eos_token_id": 248044,
            "torch_dtype": "bfloat16"}
_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
          "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
          "rope_theta": 500000.0, "attention_bias": False, "mlp_bias": False,
          "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"}
#: tiny presets: the embedded tokenizer's special ids, a vocabulary beyond its 8192 tokens
_TINY = {"vocab_size": 12000, "max_position_embeddings": 4096, "bos_token_id": None,
         "eos_token_id": 0, "torch_dtype": "float32"}


def _dense(hidden: int, mlp: int, layers: int, heads: int, kv_heads: int, tied: bool
           ) -> dict[str, Any]:
    return {"hidden_size": hidden, "intermediate_size": mlp, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "tie_word_embeddings": tied}


def _hybrid(hidden: int, mlp: int, layers: int, heads: int, kv_heads: int, head_dim: int,
            linear_k_heads: int, linear_v_heads: int, rope_theta: float) -> dict[str, Any]:
    return {"hidden_size": hidden, "intermediate_size": mlp, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
            "linear_num_key_heads": linear_k_heads, "linear_num_value_heads": linear_v_heads,
            # gated DeltaNet : full attention = 3 : 1 (full_attention_interval 4)
            "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                            for i in range(layers)],
            "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta,
                                "partial_rotary_factor": 0.25}}


def _llama3_rope(factor: float, original: int = 8192) -> dict[str, Any]:
    return {"rope_scaling": {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": original}}


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "qwen3": {
        "tiny": {**_QWEN3, **_dense(64, 128, 2, 4, 2, False), "head_dim": 16, **_TINY},
        "0.6b": {**_QWEN3, **_dense(1024, 3072, 28, 16, 8, True)},
        "1.7b": {**_QWEN3, **_dense(2048, 6144, 28, 16, 8, True)},
        "4b": {**_QWEN3, **_dense(2560, 9728, 36, 32, 8, True)},
        "8b": {**_QWEN3, **_dense(4096, 12288, 36, 32, 8, False)},
        "14b": {**_QWEN3, **_dense(5120, 17408, 40, 40, 8, False)},
        "32b": {**_QWEN3, **_dense(5120, 25600, 64, 64, 8, False)},
    },
    "qwen3_moe": {
        "tiny": {**_QWEN3_MOE, **_dense(64, 128, 2, 4, 2, False), "head_dim": 16, **_TINY,
                 "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2},
        "30b-a3b": {**_QWEN3_MOE, **_dense(2048, 6144, 48, 32, 4, False),
                    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8},
    },
    "qwen3_5": {
        "tiny": {**_QWEN3_5, **_hybrid(64, 128, 4, 4, 2, 16, 2, 4, 1e7), **_TINY,
                 "linear_key_head_dim": 16, "linear_value_head_dim": 16},
        "9b": {**_QWEN3_5, **_hybrid(4096, 12288, 32, 16, 4, 256, 16, 32, 1e7)},
        "27b": {**_QWEN3_5, **_hybrid(5120, 17408, 64, 24, 4, 256, 16, 48, 1e7)},
    },
    "llama": {
        "tiny": {**_LLAMA, **_dense(64, 128, 2, 4, 2, False), "head_dim": 16, **_TINY,
                 **_llama3_rope(8.0, original=512)},
        "3b": {**_LLAMA, **_dense(3072, 8192, 28, 24, 8, True), "head_dim": 128,
               **_llama3_rope(32.0)},
        "8b": {**_LLAMA, **_dense(4096, 14336, 32, 32, 8, False), **_llama3_rope(8.0)},
    },
}


#: ``--size`` when left out: the size of each family closest to 8B
DEFAULT_SIZES = {"qwen3": "8b", "qwen3_moe": "30b-a3b", "qwen3_5": "9b", "llama": "8b"}


def preset_config(arch: str, size: str | None = None) -> dict[str, Any]:
    """A copy of the ``config.json`` dict of ``arch`` at ``size`` (None: ``DEFAULT_SIZES``);
    ValueError lists the choices."""
    if arch not in PRESETS:
        raise ValueError(f"--arch {arch!r} has no presets; choose one of {', '.join(PRESETS)} "
                         "(or pass --model-config config.json)")
    sizes = PRESETS[arch]
    size = size or DEFAULT_SIZES[arch]
    if size not in sizes:
        raise ValueError(f"--size {size!r} is not a {arch} preset; choose one of "
                         f"{', '.join(sizes)} (or pass --model-config config.json)")
    return copy.deepcopy(sizes[size])


def describe(config: dict[str, Any]) -> str:
    """One line naming the shape: layers, hidden, heads, MLP or experts, vocabulary."""
    heads = (f"{config.get('num_attention_heads')}/{config.get('num_key_value_heads')} heads"
             + (f" of {config['head_dim']}" if config.get("head_dim") else ""))
    parts = [f"{config.get('num_hidden_layers')} layers", f"hidden {config.get('hidden_size')}",
             heads]
    if config.get("num_experts"):
        parts.append(f"{config['num_experts']} experts (top {config.get('num_experts_per_tok')}) "
                     f"of MLP {config.get('moe_intermediate_size')}")
    else:
        parts.append(f"MLP {config.get('intermediate_size')}")
    layer_types = config.get("layer_types") or []
    if "linear_attention" in layer_types:
        parts.append(f"{layer_types.count('linear_attention')} gated DeltaNet + "
                     f"{layer_types.count('full_attention')} attention layers")
    parts.append(f"vocabulary {config.get('vocab_size')}")
    return ", ".join(parts)
