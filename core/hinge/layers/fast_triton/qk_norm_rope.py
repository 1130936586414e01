"""Per-head RMSNorm of q and k followed by rotary embedding (neox / rotate-half), one kernel, CUDA.

Contract: ``q`` (T, Hq, D) and ``k`` (T, Hk, D), each head with a unit last stride (views into the
fused qkv output are fine); ``q_weight``, ``k_weight`` (D,); ``cos``, ``sin`` (T, 1, R) or (T, R)
as ``RotaryEmbedding.forward`` returns them (rows of the table, the rotation's sign folded into
``sin``: ``sin = [-sin_half | sin_half]``), R <= D even. Returns ``(q', k')`` in q's dtype, each
contiguous (``RotaryEmbedding.apply_qk`` returns views of one tensor; a contiguous q spares the
attention backend a copy: flashinfer's ``q.contiguous()`` took 2.5 us a layer at batch 64 on the
H200, docs/benchmarks.md sixth session):

- ``n = x * rsqrt(mean(x^2) + eps) * w`` over the head (float32 statistics, rounded once to the
  dtype: the bits ``RMSNorm`` gives on CUDA up to ``F.rms_norm``'s own rounding); with
  ``offset`` (1.0: the ``(1 + w)`` norms of Qwen3.5) ``w = weight + offset`` rounded to the
  weight's dtype first, as ``RMSNorm`` forms it;
- ``out[i] = n[i] * cos[i] + n[(i + R/2) mod R] * sin[i]`` for ``i < R`` in float32 with one
  rounding (torch rounds ``n * cos`` first, so the two differ by about one ulp); ``out[i] = n[i]``
  for ``i >= R``.

With ``v``, ``k_cache``, ``v_cache`` and ``loc`` (``hinge.layers.fast_triton.kv_write``'s
contract: caches (slots, Hk, D) contiguous in q's dtype, ``loc`` (T,) integer slots) the key
heads' programs also store ``k'`` and copy ``v`` into slot ``loc[t]`` (the step's KV write in
this launch: ``k_cache[loc[t]]`` gets the returned ``k'``'s bits, ``v_cache[loc[t]]`` v's).

One program per (token, head). Graph-capturable (no host syncs). With
``hinge.devices.early_dependents`` it is launched early (behind the qkv GEMM, which lets it: it
waits for that kernel at its start) and lets the kernel after it (the KV write) launch early.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.devices import early_dependents
from hinge.layers.fast_triton import kv_write as kv_copy

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _qk_norm_rope_kernel(q_ptr, k_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, HQ, D, R,
                         stride_qt, stride_qh, stride_kt, stride_kh, stride_ct, stride_st,
                         stride_qot, stride_kot, eps, offset, v_ptr, kc_ptr, vc_ptr, loc_ptr,
                         stride_vt, stride_vh, HK, BLOCK_D: tl.constexpr,
                         HAS_OFFSET: tl.constexpr, EARLY: tl.constexpr, WRITE_KV: tl.constexpr):
    if EARLY:  # hinge.devices.early_dependents: the KV write after it may launch now, and this
        tl.extra.cuda.gdc_launch_dependents()  # kernel, launched early behind the qkv GEMM,
        tl.extra.cuda.gdc_wait()  # waits for it here
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs = tl.arange(0, BLOCK_D)
    half = R // 2
    in_d = offs < D
    in_r = offs < R
    partner = tl.where(in_r, (offs + half) % tl.maximum(R, 1), offs)
    if h < HQ:
        src = q_ptr + t * stride_qt + h * stride_qh
        w_ptr = qw_ptr
        dst = qo_ptr + t * stride_qot + h * D
    else:
        src = k_ptr + t * stride_kt + (h - HQ) * stride_kh
        w_ptr = kw_ptr
        dst = ko_ptr + t * stride_kot + (h - HQ) * D
    x = tl.load(src + offs, mask=in_d, other=0.0).to(tl.float32)
    xp = tl.load(src + partner, mask=in_d, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.load(w_ptr + offs, mask=in_d, other=0.0)
    wp = tl.load(w_ptr + partner, mask=in_d, other=0.0)
    if HAS_OFFSET:
        w = (w.to(tl.float32) + offset).to(w_ptr.dtype.element_ty)
        wp = (wp.to(tl.float32) + offset).to(w_ptr.dtype.element_ty)
    w = w.to(tl.float32)
    wp = wp.to(tl.float32)
    dtype = qo_ptr.dtype.element_ty
    n = (x * rstd * w).to(dtype).to(tl.float32)
    n_partner = (xp * rstd * wp).to(dtype).to(tl.float32)
    c = tl.load(cos_ptr + t * stride_ct + offs, mask=in_r, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + t * stride_st + offs, mask=in_r, other=0.0).to(tl.float32)
    out = tl.where(in_r, n * c + n_partner * s, n).to(dtype)
    tl.store(dst + offs, out, mask=in_d)
    if WRITE_KV:
        if h >= HQ:  # a key head: k' and this head's values into the token's KV slot
            slot = tl.load(loc_ptr + t).to(tl.int64) * HK * D + (h - HQ) * D
            tl.store(kc_ptr + slot + offs, out, mask=in_d)
            values = tl.load(v_ptr + t * stride_vt + (h - HQ) * stride_vh + offs, mask=in_d)
            tl.store(vc_ptr + slot + offs, values, mask=in_d)


def supports(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> bool:
    """Whether ``qk_norm_rope`` takes these (the module docstring's shapes, one dtype and device)."""
    rot = cos.shape[-1]
    return (q.dim() == 3 and k.dim() == 3 and q.shape[0] == k.shape[0] == cos.shape[0]
            and q.shape[2] == k.shape[2] and rot % 2 == 0 and rot <= q.shape[2]
            and q.dtype == k.dtype and q.dtype in DTYPES and q.stride(-1) == 1 and k.stride(-1) == 1
            and q.device == k.device == cos.device)


def writes_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, loc: torch.Tensor) -> bool:
    """Whether ``qk_norm_rope`` can also write this step's KV (the module docstring's caches):
    what ``kv_write`` takes, in q's dtype and on q's device."""
    return (kv_copy.supports(k_cache, v_cache, loc, k, v) and v.dtype == q.dtype
            and v.device == k_cache.device == v_cache.device == loc.device == q.device)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                 eps: float, cos: torch.Tensor, sin: torch.Tensor, offset: float = 0.0,
                 kv_target: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rope(norm_q(q)), rope(norm_k(k)))`` as the module docstring says; with ``kv_target``
    ``(v, k_cache, v_cache, loc)`` also the step's KV write."""
    if kv_target is not None and not writes_kv(q, k, *kv_target):
        v, k_cache, _, loc = kv_target
        raise ValueError(
            f"qk_norm_rope's KV write takes v of k's shape {tuple(k.shape)} and contiguous caches "
            f"(slots, {k.shape[1]}, {k.shape[2]}) in {q.dtype} with one integer slot a token; got v "
            f"{tuple(v.shape)} {v.dtype}, cache {tuple(k_cache.shape)} {k_cache.dtype}, loc "
            f"{tuple(loc.shape)} {loc.dtype}; write the KV with hinge.layers.kv_write instead")
    if not supports(q, k, cos):
        raise ValueError(
            f"qk_norm_rope takes q (T, Hq, D), k (T, Hk, D) of one dtype in {DTYPES} with unit last "
            f"stride and cos/sin (T, 1, R) with R even <= D; got q {tuple(q.shape)} {q.dtype}, "
            f"k {tuple(k.shape)} {k.dtype}, cos {tuple(cos.shape)}; use the norms and "
            "RotaryEmbedding.apply_qk instead")
    t, hq, d = q.shape
    hk = k.shape[1]
    rot = cos.shape[-1]
    cos2, sin2 = cos.reshape(t, rot), sin.reshape(t, rot)
    cos2 = cos2 if cos2.stride(-1) == 1 else cos2.contiguous()
    sin2 = sin2 if sin2.stride(-1) == 1 else sin2.contiguous()
    q_out = torch.empty(t, hq, d, dtype=q.dtype, device=q.device)
    k_out = torch.empty(t, hk, d, dtype=q.dtype, device=q.device)
    if t:
        early = early_dependents(q.device)
        v, k_cache, v_cache, loc = kv_target if kv_target is not None else (k, k_out, k_out, cos2)
        _qk_norm_rope_kernel[(t, hq + hk)](
            q, k, q_weight, k_weight, cos2, sin2, q_out, k_out, hq, d, rot, q.stride(0),
            q.stride(1), k.stride(0), k.stride(1), cos2.stride(0), sin2.stride(0),
            q_out.stride(0), k_out.stride(0), eps, float(offset), v, k_cache, v_cache, loc,
            v.stride(0), v.stride(1), hk, BLOCK_D=triton.next_power_of_2(d), HAS_OFFSET=bool(offset),
            EARLY=early, WRITE_KV=kv_target is not None, launch_pdl=early,
            num_warps=1 if d <= 256 else 4)
    return q_out, k_out
