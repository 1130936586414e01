"""The kit's contracts for the nvfp4 quantizer: packaging, and every linear / expert check with
NVFP4 checkpoint tensors (ModelOpt's layout) whose exact dequantization is the reference."""

from __future__ import annotations

import pytest
import torch

from hinge.testing import PluginPackagingContract, QuantizerContract
from hinge_nvfp4 import format as fp4
from hinge_nvfp4.plugin import NVFP4_SPEC


class TestPackaging(PluginPackagingContract):
    plugin_name, distribution = "nvfp4", "hinge-llm"


class TestNVFP4Quantizer(QuantizerContract):
    @pytest.fixture
    def spec(self):
        return NVFP4_SPEC

    def checkpoint_tensors(self, weight, bias, dtype):
        """ModelOpt tensors of ``weight`` and the values they dequantize to (in ``dtype``)."""
        packed, scales, scale_2 = fp4.quantize_weight(weight.to(dtype))
        tensors = {"weight": packed, "weight_scale": scales, "weight_scale_2": scale_2,
                   "input_scale": fp4.global_scale(torch.tensor(4.0))}
        if bias is not None:
            tensors["bias"] = bias.to(dtype)
        return tensors, fp4.dequantize(packed, scales, scale_2, torch.float64)

    def tolerance(self, dtype):
        # float32 sums of exactly dequantized weights; bf16/fp16: the output's one rounding
        return {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}[dtype] * 10
