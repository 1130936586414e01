"""Qwen3-MoE: Qwen3 with a sparse MoE block on layers chosen by ``decoder_sparse_step`` and
``mlp_only_layers`` (the others keep a dense MLP of ``intermediate_size``). The block's experts
are one ``FusedMoE`` (``mlp.experts.w13_weight`` / ``w2_weight``) loaded from the per-expert
checkpoint tensors ``mlp.experts.{e}.{gate,up,down}_proj.weight``."""

from __future__ import annotations

from typing import Any

from torch import nn

from hinge.layers import GatedMLP, SparseMoeBlock
from hinge.models.dense import DenseDecoderLM


def is_sparse_layer(cfg: Any, layer_idx: int) -> bool:
    step = getattr(cfg, "decoder_sparse_step", 1) or 1
    return (
        layer_idx not in (getattr(cfg, "mlp_only_layers", None) or [])
        and cfg.num_experts > 0
        and (layer_idx + 1) % step == 0
    )


class Qwen3MoeForCausalLM(DenseDecoderLM):
    qk_norm = True

    def make_mlp(self, cfg: Any, layer_idx: int, quantizer, dtype, deterministic, prefix: str) -> nn.Module:
        if not is_sparse_layer(cfg, layer_idx):
            return GatedMLP(
                cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, quantizer, dtype, prefix,
                deterministic=deterministic, tp=self.tp,
            )
        return SparseMoeBlock.from_config(cfg, quantizer, dtype, prefix, deterministic=deterministic, tp=self.tp)
