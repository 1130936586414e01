"""Qwen3-Next: Qwen3.5's hybrid stack with the fused DeltaNet projections (``in_proj_qkvz``,
``in_proj_ba``) and a sparse MoE block with a sigmoid-gated shared expert on the layers chosen by
``decoder_sparse_step`` / ``mlp_only_layers``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hinge.layers import SINGLE, GatedMLP, Linear, SparseMoeBlock
from hinge.models.qwen3_5 import Qwen3_5ForCausalLM
from hinge.models.qwen3_moe import is_sparse_layer


class SharedExpertMoeBlock(SparseMoeBlock):
    """``experts(x) + sigmoid(shared_expert_gate(x)) * shared_expert(x)``."""

    def __init__(self, *, shared_intermediate_size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        hidden, prefix = kwargs["hidden_size"], kwargs.get("prefix", "")
        quantizer, dtype = kwargs["quantizer"], kwargs["dtype"]
        self.shared_expert = GatedMLP(hidden, shared_intermediate_size, kwargs["hidden_act"],
                                      quantizer, dtype, f"{prefix}.shared_expert",
                                      deterministic=self.deterministic, tp=kwargs.get("tp", SINGLE))
        self.shared_expert_gate = Linear(hidden, 1, False, quantizer, dtype, f"{prefix}.shared_expert_gate")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return super().forward(x) + shared


class Qwen3NextForCausalLM(Qwen3_5ForCausalLM):
    deltanet_layout = "qwen3_next"

    def make_mlp(self, cfg: Any, layer_idx: int, quantizer, dtype, deterministic, prefix: str) -> nn.Module:
        if not is_sparse_layer(cfg, layer_idx):
            return super().make_mlp(cfg, layer_idx, quantizer, dtype, deterministic, prefix)
        return SharedExpertMoeBlock.from_config(
            cfg, quantizer, dtype, prefix, deterministic=deterministic, tp=self.tp,
            shared_intermediate_size=cfg.shared_expert_intermediate_size,
        )
