"""Fused residual add + RMSNorm on CUDA: one program per row, one pass over the row.

Contract: ``x`` (the sublayer's output) and ``residual`` of one shape (..., D) and dtype, ``weight``
(D,). Returns ``(normed, new_residual)`` in that dtype, where

- ``new_residual = x + residual`` computed in float32 and rounded once to the dtype (the bits of
  torch's own add of two bf16/fp16 tensors: it adds in float32 and rounds);
- ``normed = new_residual * rsqrt(mean(new_residual^2) + eps) * w`` with the statistics and the
  products in float32 and one rounding (the formula of ``F.rms_norm`` and
  ``batch_invariant.rmsnorm_reference``); ``w = weight + offset`` rounded to the weight's dtype
  first, as ``rmsnorm_reference`` forms it (``offset=1.0``: the ``(1 + w)`` variant).

Rows up to ``MAX_WIDTH`` elements; the whole row is one block. Graph-capturable (no host syncs).
With ``hinge.devices.early_dependents`` it lets the next kernel (a GEMM) launch early, and is
itself launched early (it waits for the kernel before it at its start).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.devices import early_dependents

MAX_WIDTH = 1 << 16
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, res_ptr, D, stride_x, stride_r, stride_out,
                        stride_res, eps, offset, BLOCK_D: tl.constexpr, HAS_OFFSET: tl.constexpr,
                        EARLY_DEPENDENTS: tl.constexpr):
    if EARLY_DEPENDENTS:  # hinge.devices.early_dependents: the next GEMM may start its weights,
        tl.extra.cuda.gdc_launch_dependents()  # and this kernel itself launched early: it waits
        tl.extra.cuda.gdc_wait()  # for the kernel before it (the GEMM that wrote x) here
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * stride_r + offs, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(res_ptr.dtype.element_ty)
    tl.store(res_ptr + row * stride_res + offs, s, mask=mask)
    h = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / D + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    if HAS_OFFSET:
        w = (w.to(tl.float32) + offset).to(w_ptr.dtype.element_ty)
    tl.store(out_ptr + row * stride_out + offs, (h * rstd * w.to(tl.float32)).to(out_ptr.dtype.element_ty),
             mask=mask)


def supports(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``add_rmsnorm`` takes these: one shape and float dtype for x, residual and weight
    (D,), one device, rows of at most ``MAX_WIDTH``."""
    d = x.shape[-1]
    return (x.shape == residual.shape and x.dtype == residual.dtype == weight.dtype
            and x.dtype in DTYPES and weight.shape == (d,) and d <= MAX_WIDTH
            and x.device == residual.device == weight.device)


def _num_warps(block: int) -> int:
    return 1 if block <= 256 else 4 if block <= 2048 else 8 if block <= 8192 else 16


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)``, as the module docstring says."""
    d = x.shape[-1]
    if not supports(x, residual, weight):
        raise ValueError(
            f"add_rmsnorm takes x and residual of one shape and dtype in {DTYPES} (rows of at most "
            f"{MAX_WIDTH}) and weight (D,) of that dtype on one device; got x {tuple(x.shape)} "
            f"{x.dtype}, residual {tuple(residual.shape)} {residual.dtype}, weight "
            f"{tuple(weight.shape)} {weight.dtype}; add and norm separately instead")
    xs, rs = x.reshape(-1, d), residual.reshape(-1, d)
    xs = xs if xs.stride(-1) == 1 else xs.contiguous()
    rs = rs if rs.stride(-1) == 1 else rs.contiguous()
    out = torch.empty(xs.shape, dtype=x.dtype, device=x.device)
    res = torch.empty(xs.shape, dtype=x.dtype, device=x.device)
    if xs.shape[0]:
        block, early = triton.next_power_of_2(d), early_dependents(x.device)
        _add_rmsnorm_kernel[(xs.shape[0],)](
            xs, rs, weight, out, res, d, xs.stride(0), rs.stride(0), out.stride(0), res.stride(0),
            eps, float(offset), BLOCK_D=block, HAS_OFFSET=bool(offset),
            EARLY_DEPENDENTS=early, launch_pdl=early, num_warps=_num_warps(block))
    return out.reshape(x.shape), res.reshape(x.shape)
