"""Batch-invariant ``F.linear`` on CUDA: a Triton GEMM with one tile configuration per weight.

A row's bits must not depend on how many rows share the batch. cuBLAS picks its kernel (tile
shape, split-K, stream-K) from M, so the same row can be summed in a different order in a batch of
1 and a batch of 64. Here every output tile is one program that walks K from 0 to the end in steps
of ``BLOCK_K`` with one ``tl.dot`` per step, accumulating in float32: no split-K, no atomics, and
the configuration is a function of the weight shape (N, K), the dtype and the device only, never
of M. Rows past M are loaded as zeros and never written; an output element depends on its own row
of ``x`` and its column of the weight, nothing else.

``M`` is not specialized on (``do_not_specialize``), so M = 1 compiles to the same kernel as any M.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinge.devices import num_sms

#: streaming multiprocessors assumed when there is no CUDA device (the CPU interpreter)
DEFAULT_NUM_SMS = 132
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class MatmulConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 4


@functools.lru_cache(maxsize=256)
def matmul_config(n: int, k: int, dtype: torch.dtype, num_sms: int) -> MatmulConfig:
    """The one configuration for a weight of shape (n, k): never a function of the row count.

    64-row tiles (one Hopper warpgroup); the widest column tile that still gives every SM a tile,
    so a decode step (few rows, bound by reading the weight) streams from all SMs; 128-deep K
    steps and 3-4 stages keep enough of the weight in flight per SM. A prefill gets the widest
    tile the weight allows.
    """
    block_n = next((bn for bn in (128, 64) if triton.cdiv(n, bn) >= num_sms), 32)
    if dtype == torch.float32:
        return MatmulConfig(64, block_n, 32, num_stages=3)
    return MatmulConfig(64, block_n, 128, num_stages=4 if block_n <= 64 else 3)


@triton.jit(do_not_specialize=["M"])
def _matmul_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # grouped order (tiles of GROUP_M row blocks share the weight columns in L2); order only
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_n)) % group_size
    pid_n = (pid % (GROUP_M * num_n)) // group_size
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    row_ok = offs_m < M
    col_ok = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & col_ok[None, :], other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])



def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, (..., K) x (N, K) -> (..., N) in ``x``'s dtype, batch invariant.

    The bias is added to the float32 accumulator before the one rounding to ``x``'s dtype.
    """
    if x.dtype != weight.dtype or x.dtype not in DTYPES:
        raise ValueError(f"batch-invariant linear needs x and weight of one dtype among "
                         f"float16/bfloat16/float32, got {x.dtype} and {weight.dtype}; cast first")
    n, k = weight.shape
    lead = x.shape[:-1]
    a = x.reshape(-1, k)
    if a.stride(-1) != 1:
        a = a.contiguous()
    m = a.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0:
        return out.reshape(*lead, n)
    cfg = matmul_config(n, k, x.dtype, num_sms(x.device, DEFAULT_NUM_SMS))
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    _matmul_kernel[grid](
        a, weight, bias if bias is not None else out, out, m, n, k,
        a.stride(0), a.stride(1), weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
        HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out.reshape(*lead, n)
