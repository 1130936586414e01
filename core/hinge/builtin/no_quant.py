"""Quantizer ``none``: plain weights in the model dtype; ``apply`` is a linear layer.

With ``build.deterministic`` the matmul is ``hinge.layers.batch_invariant.linear`` (16-row blocks).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hinge.builtin.plugin import NO_QUANTIZER
from hinge.contracts import Quantizer
from hinge.layers import batch_invariant


class NoQuantizer(Quantizer):
    capabilities = NO_QUANTIZER.capabilities

    def __init__(self, options: Any = None, build: Any = None) -> None:
        self.options = options
        self.build = build
        self.deterministic = bool(getattr(build, "deterministic", False))

    def create_weights(
        self, layer: nn.Module, in_features: int, out_features: int, bias: bool, dtype: torch.dtype
    ) -> None:
        layer.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)
        layer.bias = (
            nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        )

    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.deterministic:
            return batch_invariant.linear(x, layer.weight, layer.bias)
        return F.linear(x, layer.weight, layer.bias)
