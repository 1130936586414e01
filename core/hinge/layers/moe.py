"""Sparse mixture-of-experts block (Qwen3-MoE): top-k softmax routing over SwiGLU experts.

Experts are ordinary ``GatedMLP`` modules named as in HF checkpoints
(``mlp.experts.{e}.gate_proj``), so their linears go through the quantizer like any other.
The expert loop runs in ascending expert order, so a token's sum is accumulated in a fixed order;
with ``deterministic`` the router uses the batch-invariant kernels too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from hinge.layers import batch_invariant
from hinge.layers.linear import GatedMLP

if TYPE_CHECKING:
    from hinge.contracts import Quantizer


class Router(nn.Module):
    """The gate: plain (never quantized) ``(num_experts, hidden)`` weight."""

    def __init__(self, num_experts: int, hidden_size: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=dtype), requires_grad=False)


class SparseMoeBlock(nn.Module):
    def __init__(
        self,
        *,
        hidden_size: int,
        moe_intermediate_size: int,
        num_experts: int,
        top_k: int,
        norm_topk_prob: bool,
        hidden_act: str,
        quantizer: Quantizer,
        dtype: torch.dtype,
        deterministic: bool = False,
        prefix: str = "",
    ) -> None:
        super().__init__()
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={top_k} must be in 1..num_experts={num_experts}")
        self.num_experts = num_experts
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob
        self.deterministic = deterministic
        self.gate = Router(num_experts, hidden_size, dtype)
        self.experts = nn.ModuleList(
            GatedMLP(
                hidden_size, moe_intermediate_size, hidden_act, quantizer, dtype,
                f"{prefix}.experts.{e}", deterministic=deterministic,
            )
            for e in range(num_experts)
        )

    @classmethod
    def from_config(cls, cfg: Any, quantizer: Quantizer, dtype: torch.dtype, prefix: str, *,
                    deterministic: bool = False, **extra: Any) -> SparseMoeBlock:
        """The block a HF MoE config describes (``moe_intermediate_size``, ``num_experts``,
        ``num_experts_per_tok``, ``norm_topk_prob``, ``hidden_act``); ``extra`` goes to a subclass."""
        return cls(
            hidden_size=cfg.hidden_size,
            moe_intermediate_size=cfg.moe_intermediate_size,
            num_experts=cfg.num_experts,
            top_k=cfg.num_experts_per_tok,
            norm_topk_prob=bool(cfg.norm_topk_prob),
            hidden_act=cfg.hidden_act,
            quantizer=quantizer,
            dtype=dtype,
            deterministic=deterministic,
            prefix=prefix,
            **extra,
        )

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(T, hidden) -> top-k weights (T, k) in x's dtype and expert ids (T, k)."""
        if self.deterministic:
            logits = batch_invariant.linear(x, self.gate.weight)
            probs = batch_invariant.softmax(logits)
        else:
            logits = F.linear(x, self.gate.weight)
            probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.route(x)
        out = torch.zeros_like(x)
        hit = torch.bincount(experts.flatten(), minlength=self.num_experts).tolist()
        for e, count in enumerate(hit):
            if count == 0:
                continue
            token_idx, k_pos = torch.where(experts == e)
            # NOTE: index_select, not x[idx]: CPU advanced indexing is slow under load
            w = weights.reshape(-1).index_select(0, token_idx * self.top_k + k_pos)
            y = self.experts[e](x.index_select(0, token_idx)) * w[:, None]
            out.index_add_(0, token_idx, y.to(out.dtype))
        return out
