"""The SwiGLU MLP of Llama, Qwen and LFM2: ``down(act(gate(x)) * up(x))`` with gate and up in
one GEMM (``gate_up_proj``, column-parallel) and ``down_proj`` row-parallel. With SiLU, on CUDA
outside the deterministic mode, the activation is one Triton kernel (``fast_triton.silu_mul``:
one rounding instead of two), or the quantizer's own GEMM with the activation fused where it has
one (``Quantizer.apply_gated``: ``kernel: mma`` of ``nvfp4`` at decode)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from hinge.layers import batch_invariant, fast_triton
from hinge.layers.activation import ACTIVATIONS, get_activation
from hinge.layers.linear import SINGLE, Linear, TensorParallel

if TYPE_CHECKING:
    from hinge.contracts import Quantizer

HF_NAMES = ("gate_proj", "up_proj", "down_proj")


class GatedMLP(nn.Module):
    """Modules ``gate_up_proj`` and ``down_proj`` under ``prefix``; ``names`` are the checkpoint's
    names of gate, up and down (``gate_proj, up_proj, down_proj``; LFM2: ``w1, w3, w2``)."""

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
        *,
        names: tuple[str, str, str] = HF_NAMES,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        gate, up, down = (f"{prefix}.{n}" for n in names)
        self.deterministic = deterministic
        self.gate_up_proj = Linear(
            hidden_size, (intermediate_size, intermediate_size), bias, quantizer, dtype,
            f"{prefix}.gate_up_proj", shard_names=(gate, up), parallel="column", tp=tp,
        )
        self.down_proj = Linear(intermediate_size, hidden_size, bias, quantizer, dtype,
                                f"{prefix}.down_proj", shard_names=(down,), parallel="row", tp=tp)
        self.width = self.gate_up_proj.spec.output_sizes_per_partition[0]
        self.act = get_activation(hidden_act)
        self.is_silu = self.act is ACTIVATIONS["silu"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_silu and not self.deterministic:
            fused = self.gate_up_proj.gated(x, "silu")  # the quantizer's GEMM with the activation
            if fused is not None:
                return self.down_proj(fused)
        gate_up = self.gate_up_proj(x)
        if self.deterministic:
            return self.down_proj(batch_invariant.gated_activation(gate_up, self.act))
        if self.is_silu and fast_triton.enabled(gate_up) and fast_triton.kernels().silu_mul.supports(gate_up):
            return self.down_proj(fast_triton.kernels().silu_mul.silu_mul(gate_up))
        return self.down_proj(self.act(gate_up[..., : self.width]) * gate_up[..., self.width :])
