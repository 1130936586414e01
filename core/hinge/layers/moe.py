"""Sparse mixture-of-experts block (Qwen3-MoE, Qwen3-Next): top-k softmax routing over SwiGLU
experts that the quantizer owns as one set (``FusedMoE``: stacked ``w13`` / ``w2``).

    x -> gate (router, never quantized) -> softmax -> top-k (sorted by expert id)
      -> experts(x, topk_ids, topk_weights) = Quantizer.apply_moe

Routing stays on the device (no host sync). The top-k slots of a token are ordered by expert
id, so ``apply_moe`` sums a token's terms in ascending expert order whatever else is in the
batch; with ``deterministic`` the router uses the batch-invariant kernels too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from hinge.contracts import MoESpec
from hinge.layers import batch_invariant
from hinge.layers.linear import SINGLE, Route, TensorParallel, join, loadable

if TYPE_CHECKING:
    from hinge.contracts import Quantizer

STACKED = {"w13_": ("w1", "w3"), "w2_": ("w2",)}  #: parameter-name prefix -> checkpoint shards


class Router(nn.Module):
    """The gate: plain (never quantized) ``(num_experts, hidden)`` weight."""

    def __init__(self, num_experts: int, hidden_size: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=dtype), requires_grad=False)


class FusedMoE(nn.Module):
    """All experts of a block; ``quantizer.create_moe_weights`` makes their stacked parameters."""

    def __init__(self, spec: MoESpec, quantizer: Quantizer) -> None:
        super().__init__()
        self.spec = spec
        self.quantizer = quantizer
        quantizer.create_moe_weights(self, spec)

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        return self.quantizer.apply_moe(self, x, topk_ids, topk_weights)

    def checkpoint_routes(self, module_name: str) -> dict[str, Route]:
        """``{checkpoint tensor name: Route}``: ``experts.{e}.gate_proj.{x}`` -> ``w13_{x}`` shard
        ``w1`` of expert ``e``, ``up_proj`` -> ``w3``, ``down_proj.{x}`` -> ``w2_{x}``. Parameters
        named otherwise are loaded by their own name."""
        routes: dict[str, Route] = {}
        for name, tensor in loadable(self).items():
            stacked = next((p for p in STACKED if name.startswith(p)), None)
            if stacked is None:
                continue
            if getattr(tensor, "weight_loader", None) is None:
                raise ValueError(
                    f"{module_name}.{name} has no weight_loader: {type(self.quantizer).__name__}."
                    "create_moe_weights must attach one (hinge.layers.weights.moe_parameter)"
                )
            suffix = name[len(stacked):]
            for expert in range(self.spec.num_experts):
                for shard in STACKED[stacked]:
                    routes[f"{self.spec.checkpoint_name(expert, shard)}.{suffix}"] = Route(
                        join(module_name, name), shard, expert)
        return routes

    def extra_repr(self) -> str:
        s = self.spec
        return f"experts={s.num_experts}, hidden={s.hidden_size}, intermediate={s.intermediate_size}, top_k={s.top_k}"


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
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={top_k} must be in 1..num_experts={num_experts}")
        self.num_experts = num_experts
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob
        self.deterministic = deterministic
        self.gate = Router(num_experts, hidden_size, dtype)
        spec = MoESpec(
            prefix=f"{prefix}.experts", num_experts=num_experts, hidden_size=hidden_size,
            intermediate_size=moe_intermediate_size, top_k=top_k, dtype=dtype, activation=hidden_act,
            rank=tp.rank, world_size=tp.world_size,
        )
        self.experts = FusedMoE(spec, quantizer)

    @classmethod
    def from_config(cls, cfg: Any, quantizer: Quantizer, dtype: torch.dtype, prefix: str, *,
                    deterministic: bool = False, tp: TensorParallel = SINGLE, **extra: Any) -> SparseMoeBlock:
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
            tp=tp,
            **extra,
        )

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(T, hidden) -> top-k weights (T, k) in x's dtype and expert ids (T, k), each row's
        slots in ascending expert id."""
        if self.deterministic:
            logits = batch_invariant.linear(x, self.gate.weight)
            probs = batch_invariant.softmax(logits)
        else:
            logits = F.linear(x, self.gate.weight)
            probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        experts, slot = torch.sort(experts, dim=-1)
        return weights.gather(1, slot).to(logits.dtype), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.route(x)
        return self.experts(x, experts, weights)
