"""Execution paths, chosen once per quantizer by capability and device (``select_kernel``):

    torch       dequantize + matmul (``hinge_nvfp4.reference``): any device, exact semantics
    triton      Hopper (and any CUDA GPU): fused dequant GEMM, FP4 weights read once and
                dequantized in registers, bf16/fp16 activations (``triton_gemm``); experts through
                the grouped kernel (``triton_moe``)
    flashinfer  Blackwell (compute capability >= 10.0) with w4a4: native FP4 GEMM ``mm_fp4`` over
                swizzled scales (``blackwell``); never on sm_90, where flashinfer's FP4 GEMM and
                quantize are not built. UNTESTED: no Blackwell GPU was available.

Every path takes static shapes and does no host sync in ``linear`` / ``moe`` (CUDA-graph safe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from hinge_nvfp4 import reference
from hinge_nvfp4.moe import experts_cpu

if TYPE_CHECKING:
    from torch import nn

    from hinge_nvfp4.options import NVFP4Options

BLACKWELL = (10, 0)


def select_kernel(options: NVFP4Options, device: str, deterministic: bool) -> Any:
    """The kernel object for ``options.kernel`` (``auto``: by device and compute capability)."""
    name = options.kernel
    if name == "auto":
        name = "torch"
        if device == "cuda":
            name = "triton"
            if options.activations == "w4a4" and not deterministic and blackwell_fp4_available():
                name = "flashinfer"
    if name == "torch":
        return TorchKernel(deterministic)
    if device != "cuda":
        raise ValueError(f"nvfp4 kernel {name!r} runs on CUDA only; use kernel=torch (or auto) on {device}")
    if name == "triton":
        return TritonKernel(deterministic)
    if not blackwell_fp4_available():
        raise ValueError("nvfp4 kernel 'flashinfer' needs a Blackwell GPU (compute capability >= "
                         "10.0) and flashinfer installed; Hopper runs kernel=triton")
    if options.activations != "w4a4":
        raise ValueError("nvfp4 kernel 'flashinfer' computes W4A4 (FP4 activations); set "
                         "quantizer_options activations=w4a4 or use kernel=triton")
    from hinge_nvfp4.blackwell import FlashInferKernel

    return FlashInferKernel(deterministic)


def blackwell_fp4_available() -> bool:
    """A GPU of compute capability >= 10.0 and an importable flashinfer (never true on sm_90)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < BLACKWELL:
        return False
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


def moe_weights(layer: nn.Module, names: dict[str, str], prefix: str, w4a4: bool) -> tuple:
    """(packed, block scales, row scales, activation scale or None) of ``w13`` or ``w2``."""
    return (getattr(layer, prefix + names["weight"]), getattr(layer, prefix + names["weight_scale"]),
            getattr(layer, f"{prefix}row_scale"), getattr(layer, f"{prefix}act_scale") if w4a4 else None)


class TorchKernel:
    """The reference: dequantize, then matmul (float32 sums)."""

    name = "torch"

    def __init__(self, deterministic: bool) -> None:
        self.deterministic = deterministic

    def prepare_linear(self, layer: nn.Module, packed: torch.Tensor, scales: torch.Tensor) -> None:
        layer.nvfp4_packed, layer.nvfp4_scales = packed, scales

    def linear(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
               act_scale: torch.Tensor | None) -> torch.Tensor:
        return reference.linear(x, layer.nvfp4_packed, layer.nvfp4_scales, layer.row_scale, bias,
                                input_scale=act_scale, deterministic=self.deterministic)

    def prepare_moe(self, layer: nn.Module, names: dict[str, str]) -> None:
        return None

    def moe(self, layer: nn.Module, names: dict[str, str], x: torch.Tensor, topk_ids: torch.Tensor,
            topk_weights: torch.Tensor, *, w4a4: bool) -> torch.Tensor:
        return experts_cpu(x, moe_weights(layer, names, "w13_", w4a4), moe_weights(layer, names, "w2_", w4a4),
                           topk_ids, topk_weights, activation=layer.spec.activation, w4a4=w4a4,
                           deterministic=self.deterministic)


class TritonKernel(TorchKernel):
    """The fused dequant GEMM (``triton_gemm``) and grouped experts (``triton_moe``): FP4 weights,
    activations in the compute dtype (w4a4: quantized first, then fed as ``e2m1 * sx``, exact
    in bf16). CUDA tensors; under ``TRITON_INTERPRET=1`` CPU tensors too (tests)."""

    name = "triton"

    def linear(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
               act_scale: torch.Tensor | None) -> torch.Tensor:
        from hinge_nvfp4.triton_gemm import nvfp4_linear

        a, scale = x, layer.row_scale
        if act_scale is not None:
            a, scale = reference.quantize_activation(x, act_scale).to(x.dtype), layer.row_scale * act_scale
        return nvfp4_linear(a, layer.nvfp4_packed, layer.nvfp4_scales, scale, bias,
                            deterministic=self.deterministic, out_dtype=x.dtype)

    def moe(self, layer: nn.Module, names: dict[str, str], x: torch.Tensor, topk_ids: torch.Tensor,
            topk_weights: torch.Tensor, *, w4a4: bool) -> torch.Tensor:
        from hinge_nvfp4.triton_moe import nvfp4_experts

        return nvfp4_experts(x, moe_weights(layer, names, "w13_", w4a4), moe_weights(layer, names, "w2_", w4a4),
                             topk_ids, topk_weights, activation=layer.spec.activation,
                             deterministic=self.deterministic)
