"""Quantizer ``none``: plain weights in the model dtype; ``apply`` is a linear layer.

Fused and tensor-parallel layers load through the generic loaders of ``hinge.layers.weights``;
experts use the contract's default (unquantized stacked ``w13`` / ``w2``, grouped GEMM). With
``build.deterministic`` the matmuls are the batch-invariant ones (16-row blocks on CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from hinge.builtin.plugin import NO_QUANTIZER
from hinge.contracts import Quantizer
from hinge.layers import batch_invariant
from hinge.layers.weights import linear_bias, linear_parameter

if TYPE_CHECKING:
    from torch import nn

    from hinge.contracts import LinearSpec


class NoQuantizer(Quantizer):
    capabilities = NO_QUANTIZER.capabilities

    def __init__(self, options: Any = None, build: Any = None) -> None:
        self.options = options
        self.build = build
        self.deterministic = bool(getattr(build, "deterministic", False))

    def create_weights(self, layer: nn.Module, spec: LinearSpec) -> None:
        shape = (spec.output_size_per_partition, spec.input_size_per_partition)
        layer.weight = linear_parameter(spec, shape, spec.dtype)
        layer.bias = linear_bias(spec) if spec.bias else None

    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.deterministic:
            return batch_invariant.linear(x, layer.weight, layer.bias)
        return F.linear(x, layer.weight, layer.bias)
