"""Linear layers whose weights and matmul belong to the quantizer (``hinge.contracts.Quantizer``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from hinge.layers import batch_invariant
from hinge.layers.activation import get_activation

if TYPE_CHECKING:
    from hinge.contracts import Quantizer


class Linear(nn.Module):
    """``y = x W^T (+ b)`` with parameters created by ``quantizer.create_weights``.

    ``prefix`` is the layer's checkpoint name (``model.layers.0.self_attn.q_proj``), set before
    ``create_weights`` runs so a quantizer can tell layers apart (e.g. excluded modules).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool,
        quantizer: Quantizer,
        dtype: torch.dtype,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.prefix = prefix
        self.quantizer = quantizer
        quantizer.create_weights(self, in_features, out_features, bias, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantizer.apply(self, x)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, prefix={self.prefix!r}"


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))``, the SwiGLU MLP of Llama and Qwen (HF names kept)."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        quantizer: Quantizer,
        dtype: torch.dtype,
        prefix: str = "",
        bias: bool = False,
        deterministic: bool = False,
    ) -> None:
        super().__init__()
        self.deterministic = deterministic
        self.gate_proj = Linear(hidden_size, intermediate_size, bias, quantizer, dtype, f"{prefix}.gate_proj")
        self.up_proj = Linear(hidden_size, intermediate_size, bias, quantizer, dtype, f"{prefix}.up_proj")
        self.down_proj = Linear(intermediate_size, hidden_size, bias, quantizer, dtype, f"{prefix}.down_proj")
        self.act = get_activation(hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.deterministic:
            return self.down_proj(batch_invariant.gated_activation(self.gate_proj(x), self.up_proj(x), self.act))
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
