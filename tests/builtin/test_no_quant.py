from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hinge.builtin.no_quant import NoQuantizer
from hinge.layers.linear import Linear
from hinge.plugins.specs import BuildContext


def quantizer(deterministic: bool) -> NoQuantizer:
    return NoQuantizer(None, BuildContext("cpu", torch.float32, deterministic, 16))


def filled(layer: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return layer


def test_creates_weight_and_optional_bias_in_the_model_dtype():
    with_bias = Linear(8, 5, True, quantizer(False), torch.bfloat16)
    without = Linear(8, 5, False, quantizer(False), torch.float32)
    assert with_bias.weight.shape == (5, 8) and with_bias.weight.dtype == torch.bfloat16
    assert with_bias.bias.shape == (5,)
    assert without.bias is None
    assert [n for n, _ in without.named_parameters()] == ["weight"]


def test_apply_is_a_linear_layer_in_both_modes():
    x = torch.randn(21, 8)
    for deterministic in (False, True):
        layer = filled(Linear(8, 5, True, quantizer(deterministic), torch.float32), 0)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_deterministic_apply_is_batch_invariant():
    layer = filled(Linear(64, 48, True, quantizer(True), torch.float32), 1)
    x = torch.randn(50, 64)
    assert torch.equal(layer(x[33:34]), layer(x)[33:34])
    assert torch.equal(layer(x[33:34]), layer(x[30:47])[3:4])
