"""The gated DeltaNet's output norm on CUDA, one kernel: ``norm(x) * silu(z)`` per head (HF's
``RMSNormGated``, fla's ``FusedRMSNormGated``).

Contract: ``x`` (T, H, D) and ``z`` (T, H, D), each head with a unit last stride (``z`` may be a
view of the fused input projection), ``weight`` (D,). Returns (T, H, D) contiguous in x's dtype:

- ``n = x * rsqrt(mean(x^2) + eps) * weight`` with float32 statistics, rounded to the dtype (the
  bits ``F.rms_norm`` gives on CUDA up to its own rounding);
- ``out = n * z / (1 + exp(-z))`` in float32, rounded once (torch rounds ``silu(z)`` first in
  its own kernel; the two differ by about one ulp).

The torch path is five kernels (norm, cast, silu, mul, cast); this is one program per ``ROWS``
(token, head) rows. Graph-capturable (no host syncs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_WIDTH = 1 << 12


@triton.jit
def _gated_rmsnorm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, R, H, D, stride_xt, stride_xh, stride_zt,
                          stride_zh, eps, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs = tl.arange(0, BLOCK_D)
    ok = rows < R
    mask = ok[:, None] & (offs < D)[None, :]
    t = (rows // H).to(tl.int64)
    h = (rows % H).to(tl.int64)
    x = tl.load(x_ptr + (t * stride_xt + h * stride_xh)[:, None] + offs[None, :], mask=mask,
                other=0.0).to(tl.float32)
    z = tl.load(z_ptr + (t * stride_zt + h * stride_zh)[:, None] + offs[None, :], mask=mask,
                other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=offs < D, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)
    dtype = out_ptr.dtype.element_ty
    n = (x * rstd[:, None] * w[None, :]).to(dtype).to(tl.float32)
    out = n * (z / (1.0 + tl.exp(-z)))
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * D + offs[None, :], out.to(dtype), mask=mask)


def supports(x: torch.Tensor, z: torch.Tensor) -> bool:
    """Whether ``gated_rmsnorm`` takes these (the module docstring's shapes, one dtype)."""
    return (x.dim() == 3 and x.shape == z.shape and x.dtype == z.dtype and x.dtype in DTYPES
            and x.stride(-1) == 1 and z.stride(-1) == 1 and x.shape[-1] <= MAX_WIDTH
            and x.device == z.device)


def gated_rmsnorm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float,
                  rows: int | None = None) -> torch.Tensor:
    """``rmsnorm(x) * silu(z)`` per head as the module docstring says; ``rows`` (token, head) rows
    a program (default: as many as fill 4096 elements, at most 16; deterministic mode takes 1, so a
    row's reduction is its own program's whatever the batch)."""
    if not supports(x, z):
        raise ValueError(f"gated_rmsnorm takes x and z (T, H, D <= {MAX_WIDTH}) of one dtype in "
                         f"{DTYPES} with unit last strides; got x {tuple(x.shape)} {x.dtype}, z "
                         f"{tuple(z.shape)} {z.dtype}; use the norm and silu instead")
    t, h, d = x.shape
    out = torch.empty(t, h, d, dtype=x.dtype, device=x.device)
    rows_total = t * h
    if rows_total:
        block_d = triton.next_power_of_2(d)
        rows = rows or max(1, min(16, 4096 // block_d))
        _gated_rmsnorm_kernel[(triton.cdiv(rows_total, rows),)](
            x, z, weight, out, rows_total, h, d, x.stride(0), x.stride(1), z.stride(0), z.stride(1),
            eps, ROWS=rows, BLOCK_D=block_d, num_warps=4 if rows > 1 else 1)
    return out
