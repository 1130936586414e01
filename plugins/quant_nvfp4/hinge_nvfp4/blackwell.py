"""Blackwell (sm_100+): native FP4 GEMM through flashinfer's ``mm_fp4`` (W4A4).

UNTESTED on hardware: no Blackwell GPU was available. Only ``swizzle_scales`` (the layout
conversion) is tested, on CPU. ``select_kernel`` builds this kernel only when the GPU's compute
capability is >= 10.0 and flashinfer imports: flashinfer's FP4 GEMM and FP4 quantize are never
called on sm_90, where they are not built.

Scales in the 128x4 swizzled layout CUTLASS / cuDNN / flashinfer read: rows padded to a multiple
of 128 and scale columns (K/16) to a multiple of 4 with zeros (stale padding gives garbage:
vLLM issue #48898), then the scale of (row m, block kb) sits at byte

    ((m // 128) * (Kb_pad / 4) + kb // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + kb % 4
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from hinge_nvfp4.kernels import TritonKernel

if TYPE_CHECKING:
    from torch import nn


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """(M, K/16) fp8 block scales (row-major, as stored) -> the 128x4 swizzled layout, flat
    ((M_pad * Kb_pad,) fp8), zero padded."""
    m, kb = scales.shape
    m_pad, kb_pad = -(-m // 128) * 128, -(-kb // 4) * 4
    bits = torch.zeros(m_pad, kb_pad, dtype=torch.uint8, device=scales.device)
    bits[:m, :kb] = scales.view(torch.uint8)
    tiles = bits.reshape(m_pad // 128, 4, 32, kb_pad // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.contiguous().reshape(-1).view(torch.float8_e4m3fn)


class FlashInferKernel(TritonKernel):
    """W4A4 linears on flashinfer's ``mm_fp4`` (activations quantized by flashinfer's
    ``fp4_quantize`` with ``1 / input_scale``); experts through the Triton grouped kernel (W4A4
    emulated). A fused layer whose partitions have different global scales needs one GEMM per
    partition (``alpha`` is a scalar): such layers run the Triton kernel instead."""

    name = "flashinfer"

    def prepare_linear(self, layer: nn.Module, packed: torch.Tensor, scales: torch.Tensor) -> None:
        super().prepare_linear(layer, packed, scales)
        uniform = bool((layer.row_scale == layer.row_scale[0]).all())  # NOTE: once, at load time
        layer.fi_ready = uniform and hasattr(layer, "act_scale")
        if layer.fi_ready:
            layer.fi_scales = swizzle_scales(scales)
            layer.fi_alpha = (layer.row_scale[:1] * layer.act_scale).float()
            layer.fi_input_inv = (1.0 / layer.act_scale).float().reshape(1)

    def linear(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
               act_scale: torch.Tensor | None) -> torch.Tensor:
        if act_scale is None or not layer.fi_ready:
            return super().linear(layer, x, bias, act_scale)
        import flashinfer

        x_fp4, x_scales = flashinfer.fp4_quantize(x, layer.fi_input_inv)
        out = flashinfer.mm_fp4(x_fp4, layer.nvfp4_packed.T, x_scales, layer.fi_scales, layer.fi_alpha,
                                out_dtype=x.dtype)
        return out if bias is None else out + bias
