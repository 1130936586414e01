"""A step's keys and values into their KV-pool slots on CUDA, both in one kernel.

Contract: ``k`` and ``v`` (T, Hk, D) with a unit last stride (any token and head strides: views
of a fused qkv projection are fine), ``k_cache`` and ``v_cache`` (slots, Hk, D) contiguous, all
four of one dtype, ``loc`` (T,) integer slots. Afterwards ``k_cache[loc[t]] == k[t]`` and
``v_cache[loc[t]] == v[t]`` bit for bit (a copy: no rounding, so deterministic mode may take it).
One program per (token, ``BLOCK`` elements of its Hk x D), each writing the keys then the values:
one launch where ``index_copy_`` takes two. Graph-capturable (no host syncs). With
``hinge.devices.early_dependents`` it is launched early (it waits for the kernel before it first).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.devices import early_dependents

MAX_BLOCK = 1024


@triton.jit
def store_token_kv(k_ptr, v_ptr, kc_ptr, vc_ptr, loc_ptr, t, e, stride_kt, stride_kh, stride_vt,
                   stride_vh, width, D: tl.constexpr):
    """Elements ``e`` (of its ``width`` = Hk x D) of token ``t``'s keys and values into its slot
    ``loc[t]`` of the caches: the one KV copy, also inlined by kernels that fuse more copies
    (``hinge_fa4.prepare_triton``)."""
    mask = e < width
    h = e // D
    d = e % D
    dst = tl.load(loc_ptr + t).to(tl.int64) * width + e
    keys = tl.load(k_ptr + t * stride_kt + h * stride_kh + d, mask=mask)
    tl.store(kc_ptr + dst, keys, mask=mask)
    values = tl.load(v_ptr + t * stride_vt + h * stride_vh + d, mask=mask)
    tl.store(vc_ptr + dst, values, mask=mask)


@triton.jit
def _kv_write_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, loc_ptr, stride_kt, stride_kh, stride_vt,
                     stride_vh, width, D: tl.constexpr, BLOCK: tl.constexpr, EARLY: tl.constexpr):
    if EARLY:  # hinge.devices.early_dependents: launched early (behind qk_norm_rope): wait for it
        tl.extra.cuda.gdc_wait()
    t = tl.program_id(0).to(tl.int64)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    store_token_kv(k_ptr, v_ptr, kc_ptr, vc_ptr, loc_ptr, t, e, stride_kt, stride_kh, stride_vt,
                   stride_vh, width, D)


def supports(k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> bool:
    """Whether ``kv_write`` takes these (the module's contract); otherwise copy with torch."""
    return (k.dim() == 3 and k.shape == v.shape and k_cache.dim() == 3
            and k_cache.shape == v_cache.shape and tuple(k_cache.shape[1:]) == tuple(k.shape[1:])
            and k.dtype == v.dtype == k_cache.dtype == v_cache.dtype
            and k.stride(-1) == 1 and v.stride(-1) == 1
            and k_cache.is_contiguous() and v_cache.is_contiguous()
            and loc.dim() == 1 and loc.shape[0] == k.shape[0] and not loc.is_floating_point())


def kv_write(k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> None:
    """``k_cache[loc] = k`` and ``v_cache[loc] = v`` in one launch (module docstring)."""
    if not supports(k_cache, v_cache, loc, k, v):
        raise ValueError(
            f"kv_write takes k, v (T, Hk, D) with a unit last stride, contiguous caches (slots, Hk, "
            f"D) and one dtype; got k {tuple(k.shape)} {k.dtype} stride {k.stride()}, cache "
            f"{tuple(k_cache.shape)} {k_cache.dtype}; use index_copy_ instead")
    t, heads, dim = k.shape
    width = heads * dim
    if t == 0 or width == 0:
        return
    block, early = min(triton.next_power_of_2(width), MAX_BLOCK), early_dependents(k.device)
    _kv_write_kernel[(t, triton.cdiv(width, block))](
        k, v, k_cache, v_cache, loc, k.stride(0), k.stride(1), v.stride(0), v.stride(1), width,
        D=dim, BLOCK=block, EARLY=early, launch_pdl=early, num_warps=4)
