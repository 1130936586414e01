"""The one-row decode GEMV (M = 1, CUDA cores) in the scale groups' own layout: what
``triton_gemv`` runs for ``GemvConfig(layout="groups")``.

    y[n] = (sum_g sw[n, g] * sum_{j < 16} x[16 g + j] * e2m1(q[n, 16 g + j])) * row_scale[n]

The ``words`` kernel reads the codes as (rows, int32 words) and multiplies them against the
activations in a 3-D (rows of x, rows of W, words) product, then reshapes words into scale groups:
on sm_90 its loop moves every decoded code through shared memory to reach that layout (18
barriers, 18 stores and 17 loads to shared memory per K step at 8 x 512, 2 warps; docs/nvfp4.md).
Here a program reads each row's codes as int64, one scale group (16 codes) each, so the codes,
their fp8 scales and the per-group sums all live in one (rows, groups) layout: each group is
decoded, multiplied by its 16 activations (loaded per position, a (groups,) vector each, from
L1/L2) and scaled where its codes are. The sums run in the ``words`` kernel's order (each word's 8
products left to right, the two words of a group added, times the scale), so both kernels agree
to rounding; nothing here depends on other rows (no cross-row reduction).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge_nvfp4.triton_gemv import _e2m1_pair, _e4m3_scaled, _weight_rows, load_columns


@triton.jit
def _x_at(x_ptrs, j: tl.constexpr, ok, EVEN_K: tl.constexpr):
    """(1, groups) float32 activations of code position ``j`` of each group (zeros past K)."""
    if EVEN_K:
        return tl.load(x_ptrs + j).to(tl.float32)[None, :]
    return tl.load(x_ptrs + j, mask=ok, other=0.0).to(tl.float32)[None, :]


@triton.jit
def _word_products(word, x_ptrs, ok, EVEN_K: tl.constexpr):
    """(rows, groups) float32: the 8 products of one int32 word of codes (``e2m1 * 2^-14``) with
    the activations at ``x_ptrs + 0..7``, summed left to right."""
    c0, c4 = _e2m1_pair(word, 0)
    c1, c5 = _e2m1_pair(word, 1)
    c2, c6 = _e2m1_pair(word, 2)
    c3, c7 = _e2m1_pair(word, 3)
    return (_x_at(x_ptrs, 0, ok, EVEN_K) * c0 + _x_at(x_ptrs, 1, ok, EVEN_K) * c1
            + _x_at(x_ptrs, 2, ok, EVEN_K) * c2 + _x_at(x_ptrs, 3, ok, EVEN_K) * c3
            + _x_at(x_ptrs, 4, ok, EVEN_K) * c4 + _x_at(x_ptrs, 5, ok, EVEN_K) * c5
            + _x_at(x_ptrs, 6, ok, EVEN_K) * c6 + _x_at(x_ptrs, 7, ok, EVEN_K) * c7)


@triton.jit
def _nvfp4_gemv_groups_kernel(
    x_ptr, g_ptr, s_ptr, rs_ptr, bias_ptr, out_ptr, N, K, stride_gn, stride_sn, stride_os,
    k_per_split, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    GROUPS: tl.constexpr = BLOCK_K // 16
    offs_n, rows_n, g_rows, s_rows = _weight_rows(g_ptr, s_ptr, N, stride_gn, stride_sn, BLOCK_N)
    k_start = tl.program_id(1) * k_per_split
    acc = tl.zeros((BLOCK_N, GROUPS), dtype=tl.float32)
    for k0 in range(0, k_per_split, BLOCK_K):
        gs = (k_start + k0) // 16 + tl.arange(0, GROUPS)
        ok = gs < K // 16
        groups = load_columns(g_rows, gs, ok, EVEN_K).to(tl.uint64, bitcast=True)
        sbits = load_columns(s_rows, gs, ok, EVEN_K)
        low = (groups & 0xFFFFFFFF).to(tl.uint32)  # codes 16 g + 0..7
        high = (groups >> 32).to(tl.uint32)  # codes 16 g + 8..15
        x_ptrs = x_ptr + gs * 16
        part = (_word_products(low, x_ptrs, ok, EVEN_K)
                + _word_products(high, x_ptrs + 8, ok, EVEN_K))
        acc += part * _e4m3_scaled(sbits)
    out = tl.sum(acc, axis=1)
    mask = offs_n < N
    if EPILOGUE:
        out = out * tl.load(rs_ptr + rows_n)
        if HAS_BIAS:
            out = out + tl.load(bias_ptr + rows_n).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + offs_n, out.to(out_ptr.dtype.element_ty),
             mask=mask)


def launch(x, packed, sbits, row_scale, bias, part, *, k_per_split: int, split: bool, even_k: bool,
           config) -> None:
    """One launch over ``part`` ((split, 1, N) float32 partial sums, or the (1, N) output)."""
    n, k = packed.shape[0], x.shape[1]
    groups = packed.view(torch.int64)
    _nvfp4_gemv_groups_kernel[(triton.cdiv(n, config.block_n), config.split_k)](
        x, groups, sbits, row_scale, bias if bias is not None else row_scale, part, n, k,
        groups.stride(0), sbits.stride(0), part.stride(0) if split else 0, k_per_split,
        HAS_BIAS=bias is not None, EPILOGUE=not split, EVEN_K=even_k, BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages)
