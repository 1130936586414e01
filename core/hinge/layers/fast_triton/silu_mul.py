"""SiLU-and-multiply of a fused ``[gate | up]`` on CUDA (the SwiGLU MLP's activation).

Contract: ``gate_up`` (..., 2 I) with a unit last stride; returns (..., I) in its dtype with
``out = silu(gate) * up = gate / (1 + exp(-gate)) * up`` computed in float32 and rounded once
(torch's ``F.silu(gate) * up`` rounds twice, so the two differ by at most about one ulp). One
program per (row, ``BLOCK`` columns). Graph-capturable (no host syncs). With
``hinge.devices.early_dependents`` it lets the next kernel (the down GEMM) launch early, and is
itself launched early (it waits for the kernel before it at its start).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.devices import early_dependents

BLOCK = 1024
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, inter, stride_gu, stride_out, BLOCK: tl.constexpr,
                     EARLY_DEPENDENTS: tl.constexpr):
    if EARLY_DEPENDENTS:  # hinge.devices.early_dependents: the next GEMM may start its weights,
        tl.extra.cuda.gdc_launch_dependents()  # and this kernel itself launched early: it waits
        tl.extra.cuda.gdc_wait()  # for the kernel before it (the GEMM that wrote gate_up) here
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < inter
    gate = tl.load(gu_ptr + row * stride_gu + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * stride_gu + inter + offs, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def supports(gate_up: torch.Tensor) -> bool:
    """Whether ``silu_mul`` takes ``gate_up``: even last dim, a dtype of ``DTYPES``."""
    return gate_up.dim() >= 1 and gate_up.shape[-1] % 2 == 0 and gate_up.dtype in DTYPES


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate_up[..., :I]) * gate_up[..., I:]`` with one rounding (module docstring)."""
    width = gate_up.shape[-1]
    if not supports(gate_up):
        raise ValueError(f"silu_mul takes a fused [gate | up] of even width in {DTYPES}, got "
                         f"{tuple(gate_up.shape)} {gate_up.dtype}; use act(gate) * up instead")
    inter = width // 2
    rows = gate_up.reshape(-1, width)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = torch.empty(rows.shape[0], inter, dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0] and inter:
        early = early_dependents(rows.device)
        _silu_mul_kernel[(rows.shape[0], triton.cdiv(inter, BLOCK))](
            rows, out, inter, rows.stride(0), out.stride(0), BLOCK=BLOCK,
            EARLY_DEPENDENTS=early, launch_pdl=early, num_warps=4)
    return out.reshape(*gate_up.shape[:-1], inter)
