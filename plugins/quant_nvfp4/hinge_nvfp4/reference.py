"""The CPU reference path: dequantize, then matmul. Exact semantics; what every kernel is checked
against.

    W4A16: y[t, n] = (sum_k x[t, k] * e2m1(q[n, k]) * sw[n, k/16]) * s2[n]        (+ bias)
    W4A4:  y[t, n] = (sum_k e2m1(qx[t, k]) * sx[t, k/16] * e2m1(q[n, k]) * sw[n, k/16])
                     * input_scale * s2[n]                                           (+ bias)

The sum runs in float32 (``e2m1 * fp8`` is exact in bfloat16 and float32, so the dequantized
weight loses nothing); the per-tensor scale multiplies the float32 sum once, then the result is
rounded to the activation dtype, as the Hopper kernel's epilogue does. With ``deterministic``
the matmuls are hinge's batch-invariant ones (16-row blocks on CPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hinge.layers import batch_invariant
from hinge_nvfp4.format import BLOCK, E2M1_MAX, E4M3_MAX, block_amax, cast_fp4, decode, unpack


def dequantize_unscaled(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(..., N, K/2) codes and (..., N, K/16) fp8 scales -> float32 ``e2m1 * scale`` (..., N, K)."""
    values = decode(unpack(packed))
    blocks = values.reshape(*values.shape[:-1], -1, BLOCK) * scales.float().unsqueeze(-1)
    return blocks.reshape(values.shape)


def quantize_activation(x: torch.Tensor, input_scale: torch.Tensor) -> torch.Tensor:
    """W4A4 emulation of the activation side: float32 ``e2m1(qx) * sx`` (x's shape), where ``sx =
    fp8(amax_block / (6 * input_scale))`` (saturating at 448) per 16 elements of a row and
    ``qx = rne_sat(x / (sx * input_scale))``. Multiply the GEMM by ``input_scale`` afterwards."""
    xf = x.float()
    sx = (block_amax(xf) / (E2M1_MAX * input_scale)).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).float()
    denom = (sx * input_scale).unsqueeze(-1)
    blocks = xf.reshape(*xf.shape[:-1], -1, BLOCK)
    codes = cast_fp4(blocks / torch.where(denom == 0, torch.ones_like(denom), denom))
    return (decode(codes) * sx.unsqueeze(-1)).reshape(x.shape)


def matmul_f32(x: torch.Tensor, w: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """float32 ``x @ w.T``."""
    x, w = x.float(), w.float()
    return batch_invariant.linear(x, w) if deterministic else F.linear(x, w)


def linear(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, row_scale: torch.Tensor,
           bias: torch.Tensor | None, *, input_scale: torch.Tensor | None = None,
           deterministic: bool = False) -> torch.Tensor:
    """``x`` (..., K) -> (..., N) in x's dtype; ``row_scale`` (N,) the per-row global scale;
    ``input_scale`` given = W4A4 emulation."""
    a = x if input_scale is None else quantize_activation(x, input_scale)
    acc = matmul_f32(a, dequantize_unscaled(packed, scales), deterministic)
    acc = acc * (row_scale if input_scale is None else row_scale * input_scale)
    if bias is not None:
        acc = acc + bias.float()
    return acc.to(x.dtype)
