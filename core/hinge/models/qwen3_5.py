"""Qwen3.5 text (``qwen3_5_text``): gated DeltaNet layers and gated full attention, by ``layer_types``.

    embed_tokens -> [input_layernorm -> linear_attn | self_attn -> +residual
                     -> post_attention_layernorm -> mlp -> +residual] x L -> norm -> lm_head

RMSNorms are the ``(1 + w)`` form (except the DeltaNet's gated norm); full attention has per-head
q/k norms, partial rotary and a sigmoid output gate (``q_proj`` emits ``[q | gate]`` per head).
Text-only positions make Qwen3.5's interleaved mRoPE plain rotary.
``Qwen3_5ForConditionalGeneration`` loads the text model of the composite vision-language layout
(``text_config``; weights under ``model.language_model.*``) and ignores the vision tower and the
MTP head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.layers import SINGLE, GatedMLP, RMSNorm, RotaryEmbedding, TensorParallel, VocabEmbedding
from hinge.layers.gated_deltanet import GatedDeltaNet
from hinge.layers.recurrent_kernels import get_recurrent_kernels
from hinge.models.dense import head_dim_of
from hinge.models.hybrid import HybridAttention, HybridDecoderLM, HybridLayer
from hinge.models.stack import pre_norm_layer

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.forward import ForwardContext
    from hinge.models.base import ModelConfig


class Qwen3_5DecoderLayer(HybridLayer):
    def __init__(self, mixer_name: str, mixer: nn.Module, mlp: nn.Module, cfg: Any, dtype, deterministic):
        super().__init__()
        norm = dict(eps=cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic, offset=1.0)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.set_mixer(mixer_name, mixer)  # "linear_attn" or "self_attn", as in the checkpoint
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.mlp = mlp

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext, residual=None):
        return pre_norm_layer(self.input_layernorm, self.mix, self.post_attention_layernorm,
                              self.mlp, h, residual, cos, sin, ctx)


class Qwen3_5ForCausalLM(HybridDecoderLM):
    deltanet_layout = "qwen3_5"
    recurrent_kind, recurrent_name = "linear_attention", "linear_attn"

    def __init__(self, config: ModelConfig, *, quantizer: Quantizer, dtype: torch.dtype,
                 deterministic: bool = False, tp: TensorParallel = SINGLE) -> None:
        super().__init__(config)
        cfg = config.hf_config
        self.tp = tp
        kernels = get_recurrent_kernels(
            str(torch.get_default_device()), deterministic=deterministic
        )
        self.rotary = RotaryEmbedding.from_config(cfg, head_dim_of(cfg))

        def deltanet(layer_idx: int, state_id: int, prefix: str) -> nn.Module:
            return GatedDeltaNet(cfg, layer_idx, state_id, quantizer, dtype, kernels, layout=self.deltanet_layout,
                                 deterministic=deterministic, prefix=prefix)

        def attention(kv_layer_id: int, prefix: str) -> nn.Module:
            return HybridAttention(cfg, kv_layer_id, self.rotary, quantizer, dtype, gated=True, norm_offset=1.0,
                                   eps=cfg.rms_norm_eps, deterministic=deterministic, prefix=prefix, tp=tp)

        layers = []
        for i, (name, mixer) in enumerate(self.build_mixers(cfg, deltanet, attention)):
            mlp = self.make_mlp(cfg, i, quantizer, dtype, deterministic, f"model.layers.{i}.mlp")
            layers.append(Qwen3_5DecoderLayer(name, mixer, mlp, cfg, dtype, deterministic))
        embed = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, dtype)
        norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic, offset=1.0)
        self.build_stack(embed, layers, norm, dtype=dtype, deterministic=deterministic)

    def make_mlp(self, cfg: Any, layer_idx: int, quantizer, dtype, deterministic, prefix: str) -> nn.Module:
        return GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, quantizer, dtype, prefix,
                        deterministic=deterministic, tp=self.tp)

    def checkpoint_param_name(self, name: str) -> str | None:
        """Text weights under ``model.*`` or (composite layout) ``model.language_model.*``; the
        vision tower and the multi-token-prediction head (a drafter, not the LM) are ignored."""
        if name.startswith(("mtp.", "model.visual.", "visual.")):
            return None
        if name.startswith("model.language_model."):
            name = "model." + name[len("model.language_model.") :]
        return super().checkpoint_param_name(name)


class Qwen3_5ForConditionalGeneration(Qwen3_5ForCausalLM):
    """The text model of the composite checkpoint; the vision tower's weights are ignored."""

    @classmethod
    def load_hf_config(cls, path, raw: dict) -> Any:
        from transformers import AutoConfig

        composite = AutoConfig.from_pretrained(str(path))
        text = composite.get_text_config()
        text.tie_word_embeddings = bool(getattr(composite, "tie_word_embeddings", False)
                                        or getattr(text, "tie_word_embeddings", False))
        return text
