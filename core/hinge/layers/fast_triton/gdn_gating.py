"""The gated DeltaNet's per-head gates on CUDA, one kernel (sglang's ``fused_gdn_gating``).

Contract: ``a`` and ``b`` (T, H) with a unit last stride (views of the fused input projection),
``A_log`` and ``dt_bias`` (H,). Returns ``(g, beta)``:

- ``g = -exp(A_log) * softplus(a + dt_bias)`` in float32 (the log decay the delta rule takes),
  ``softplus(s) = s`` above 20 (torch's threshold), else ``max(s, 0) + log(1 + exp(-|s|))``
  (torch's ``log1p(exp(s))``; the two differ by less than ``exp(-16)`` in absolute terms);
- ``beta = sigmoid(b)`` in ``b``'s dtype (computed in float32, rounded once, as torch's).

The torch formulas are eight kernels (casts, exp, neg, add, softplus, mul, sigmoid); this is one
program per ``BLOCK`` tokens x all heads. Graph-capturable (no host syncs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEADS = 1024


@triton.jit
def _gdn_gating_kernel(a_ptr, b_ptr, alog_ptr, dt_ptr, g_ptr, beta_ptr, T, H, stride_a, stride_b,
                       stride_g, stride_beta, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    heads = tl.arange(0, BLOCK_H)
    mask = (rows < T)[:, None] & (heads < H)[None, :]
    r64 = rows.to(tl.int64)[:, None]
    a = tl.load(a_ptr + r64 * stride_a + heads[None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + r64 * stride_b + heads[None, :], mask=mask, other=0.0).to(tl.float32)
    alog = tl.load(alog_ptr + heads, mask=heads < H, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + heads, mask=heads < H, other=0.0).to(tl.float32)
    s = a + dt[None, :]
    softplus = tl.where(s > 20.0, s, tl.maximum(s, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(s))))
    g = -tl.exp(alog)[None, :] * softplus
    beta = 1.0 / (1.0 + tl.exp(-b))
    tl.store(g_ptr + r64 * stride_g + heads[None, :], g, mask=mask)
    tl.store(beta_ptr + r64 * stride_beta + heads[None, :], beta.to(beta_ptr.dtype.element_ty),
             mask=mask)


def supports(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``gdn_gating`` takes these: (T, H) each, unit last strides, H <= ``MAX_HEADS``."""
    return (a.dim() == 2 and a.shape == b.shape and a.stride(-1) == 1 and b.stride(-1) == 1
            and a.dtype in DTYPES and b.dtype in DTYPES and a.shape[1] <= MAX_HEADS
            and a.device == b.device)


def gdn_gating(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor  # noqa: N803
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(g, beta)`` as the module docstring says."""
    if not supports(a, b):
        raise ValueError(f"gdn_gating takes a and b (T, H <= {MAX_HEADS}) with unit last strides in "
                         f"{DTYPES}; got a {tuple(a.shape)} {a.dtype}, b {tuple(b.shape)} {b.dtype}; "
                         "use the torch formulas instead")
    t, h = a.shape
    g = torch.empty(t, h, dtype=torch.float32, device=a.device)
    beta = torch.empty(t, h, dtype=b.dtype, device=b.device)
    if t:
        block_h = triton.next_power_of_2(h)
        block_t = max(1, min(64, 2048 // block_h))
        _gdn_gating_kernel[(triton.cdiv(t, block_t),)](
            a, b, A_log, dt_bias, g, beta, t, h, a.stride(0), b.stride(0), g.stride(0),
            beta.stride(0), BLOCK_T=block_t, BLOCK_H=block_h, num_warps=4)
    return g, beta
