"""A split decode layer's two copies as one Triton kernel: the step's keys and values into their
KV-pool slots (``hinge.layers.kv_write``'s contract) and each query row once per slot
(``hinge_fa4.split.expand_queries``'s), so a split layer launches three kernels (this, the
attention call, the merge) instead of four. Copies only: the same bits as the two it replaces.
One program per (token, ``BLOCK`` elements of its heads x head dim). Imported on CUDA only (the
CPU path is the two torch copies; tests interpret it). With ``hinge.devices.early_dependents``
launched early (it waits for the kernel before it first), and letting the attention call behind
it launch early (``hinge_fa4.early``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.devices import early_dependents
from hinge.layers.fast_triton import kv_write as kv_copy

MAX_BLOCK = 1024


@triton.jit
def _prepare_kernel(q_ptr, k_ptr, v_ptr, kc_ptr, vc_ptr, loc_ptr, qx_ptr, stride_qt, stride_qh,
                    stride_kt, stride_kh, stride_vt, stride_vh, q_width, kv_width, num_slots,
                    D: tl.constexpr, BLOCK: tl.constexpr, EARLY: tl.constexpr, WRITE_KV: tl.constexpr):
    if EARLY:  # hinge.devices.early_dependents: the attention call (hinge_fa4.early) may launch
        tl.extra.cuda.gdc_launch_dependents()  # now and wait for this kernel's end in-kernel;
        tl.extra.cuda.gdc_wait()  # this one, launched early behind qk_norm_rope, waits for it
    t = tl.program_id(0).to(tl.int64)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if WRITE_KV:  # else the layer stored them (AttentionCapabilities.kv_written_by_layer)
        kv_copy.store_token_kv(k_ptr, v_ptr, kc_ptr, vc_ptr, loc_ptr, t, e, stride_kt, stride_kh,
                               stride_vt, stride_vh, kv_width, D)
    in_q = e < q_width
    rows = tl.load(q_ptr + t * stride_qt + (e // D) * stride_qh + e % D, mask=in_q)
    for s in range(0, num_slots):  # row t's slots are rows t * S .. t * S + S - 1
        tl.store(qx_ptr + (t * num_slots + s) * q_width + e, rows, mask=in_q)


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, loc: torch.Tensor) -> bool:
    """What both copies take: (T, H, D) rows with a unit last stride, contiguous caches of k's
    head shape, one dtype, one slot per token."""
    return (kv_copy.supports(k_cache, v_cache, loc, k, v) and q.dim() == 3 and q.shape[0] == k.shape[0]
            and q.shape[2] == k.shape[2] and q.stride(-1) == 1 and q.dtype == k.dtype)


def write_kv_and_expand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                        v_cache: torch.Tensor, loc: torch.Tensor, num_slots: int,
                        write_kv: bool = True) -> torch.Tensor:
    """``k_cache[loc] = k``, ``v_cache[loc] = v`` (not with ``write_kv=False``: the layer
    stored them); returns ``expand_queries(q, num_slots)``."""
    if not supports(q, k, v, k_cache, v_cache, loc):
        raise ValueError(f"write_kv_and_expand takes q, k, v (T, H, D) with unit last strides and "
                         f"contiguous caches of one dtype; got q {tuple(q.shape)} {q.dtype}, k "
                         f"{tuple(k.shape)}, cache {tuple(k_cache.shape)} {k_cache.dtype}; use "
                         "write_kv and expand_queries instead")
    t, heads, dim = q.shape
    out = torch.empty(t * num_slots, heads, dim, dtype=q.dtype, device=q.device)
    q_width, kv_width = heads * dim, k.shape[1] * dim
    width = max(q_width, kv_width)
    if t:
        block, early = min(triton.next_power_of_2(width), MAX_BLOCK), early_dependents(q.device)
        _prepare_kernel[(t, triton.cdiv(width, block))](
            q, k, v, k_cache, v_cache, loc, out, q.stride(0), q.stride(1), k.stride(0),
            k.stride(1), v.stride(0), v.stride(1), q_width, kv_width, num_slots, D=dim,
            BLOCK=block, EARLY=early, WRITE_KV=write_kv, launch_pdl=early, num_warps=4)
    return out
