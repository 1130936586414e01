"""LFM2: gated short-conv layers and GQA attention (q/k RMSNorm, rotary), by ``layer_types``.

    embed_tokens -> [operator_norm -> conv | self_attn -> +residual
                     -> ffn_norm -> feed_forward (w2(silu(w1 x) * w3 x)) -> +residual] x L
    -> embedding_norm (the final norm, despite its name) -> lm_head (tied)

Attention tensors are named ``out_proj`` / ``q_layernorm`` / ``k_layernorm`` in the checkpoint
and map onto ``HybridAttention``'s ``o_proj`` / ``q_norm`` / ``k_norm``; q/k/v load into its
``qkv_proj``. The feed-forward's ``w1`` | ``w3`` load into ``feed_forward.gate_up_proj`` and
``w2`` into ``feed_forward.down_proj``. The conv's ``in_proj`` is already one GEMM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.layers import SINGLE, GatedMLP, RMSNorm, RotaryEmbedding, TensorParallel, VocabEmbedding
from hinge.layers.recurrent_kernels import get_recurrent_kernels
from hinge.layers.short_conv import ShortConv
from hinge.models.dense import head_dim_of
from hinge.models.hybrid import HybridAttention, HybridDecoderLM, HybridLayer
from hinge.models.stack import pre_norm_layer

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.forward import ForwardContext
    from hinge.models.base import ModelConfig

ATTN_RENAMES = {"self_attn.out_proj.": "self_attn.o_proj.", "self_attn.q_layernorm.": "self_attn.q_norm.",
                "self_attn.k_layernorm.": "self_attn.k_norm."}


def ffn_size(cfg: Any) -> int:
    size = cfg.intermediate_size
    if cfg.block_auto_adjust_ff_dim:
        size = int(2 * size / 3)
        if cfg.block_ffn_dim_multiplier is not None:
            size = int(cfg.block_ffn_dim_multiplier * size)
            size = cfg.block_multiple_of * ((size + cfg.block_multiple_of - 1) // cfg.block_multiple_of)
    return size


class Lfm2DecoderLayer(HybridLayer):
    def __init__(self, mixer_name: str, mixer: nn.Module, cfg: Any, quantizer, dtype, deterministic, prefix,
                 tp: TensorParallel = SINGLE):
        super().__init__()
        norm = dict(eps=cfg.norm_eps, dtype=dtype, deterministic=deterministic)
        self.operator_norm = RMSNorm(cfg.hidden_size, **norm)
        self.set_mixer(mixer_name, mixer)  # "conv" or "self_attn", as in the checkpoint
        self.ffn_norm = RMSNorm(cfg.hidden_size, **norm)
        # w2(silu(w1 x) * w3 x): w1 | w3 in one GEMM (gate_up_proj), w2 as down_proj
        self.feed_forward = GatedMLP(cfg.hidden_size, ffn_size(cfg), "silu", quantizer, dtype,
                                     f"{prefix}.feed_forward", deterministic=deterministic,
                                     names=("w1", "w3", "w2"), tp=tp)

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext, residual=None):
        return pre_norm_layer(self.operator_norm, self.mix, self.ffn_norm, self.feed_forward,
                              h, residual, cos, sin, ctx)


class Lfm2ForCausalLM(HybridDecoderLM):
    final_norm_name = "embedding_norm"
    recurrent_kind, recurrent_name = "conv", "conv"

    def __init__(self, config: ModelConfig, *, quantizer: Quantizer, dtype: torch.dtype,
                 deterministic: bool = False, tp: TensorParallel = SINGLE) -> None:
        super().__init__(config)
        cfg = config.hf_config
        self.tp = tp
        kernels = get_recurrent_kernels(
            str(torch.get_default_device()), deterministic=deterministic
        )
        self.rotary = RotaryEmbedding.from_config(cfg, head_dim_of(cfg))

        def conv(layer_idx: int, state_id: int, prefix: str) -> nn.Module:
            return ShortConv(cfg, layer_idx, state_id, quantizer, dtype, kernels, prefix)

        def attention(kv_layer_id: int, prefix: str) -> nn.Module:
            return HybridAttention(cfg, kv_layer_id, self.rotary, quantizer, dtype, gated=False, norm_offset=0.0,
                                   eps=cfg.norm_eps, deterministic=deterministic, prefix=prefix, tp=tp)

        layers = [
            Lfm2DecoderLayer(name, mixer, cfg, quantizer, dtype, deterministic, f"model.layers.{i}", tp)
            for i, (name, mixer) in enumerate(self.build_mixers(cfg, conv, attention))
        ]
        embed = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, dtype)
        norm = RMSNorm(cfg.hidden_size, cfg.norm_eps, dtype=dtype, deterministic=deterministic)
        self.build_stack(embed, layers, norm, dtype=dtype, deterministic=deterministic)

    def checkpoint_param_name(self, name: str) -> str | None:
        for old, new in ATTN_RENAMES.items():
            name = name.replace(old, new)
        return super().checkpoint_param_name(name)
