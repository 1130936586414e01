"""Small-batch GEMV on CUDA: ``y = x @ W.T`` for a few rows, streaming ``W`` from HBM.

Contract: ``x`` (M, K) with ``1 <= M <= MAX_ROWS`` and a unit last stride, ``W`` (N, K)
contiguous, both float16 or both bfloat16 (``supports``); the products are summed in float32 and
rounded once to ``x``'s dtype. No bias, nothing fused. Not batch invariant (the tiling depends on
M), but deterministic: a split-K configuration writes float32 partial sums and a second kernel
adds them in split order, so a run's bits do not change from run to run (no atomics). No host
syncs and no ``.item()``: capturable in a CUDA graph.

One program owns ``block_n`` rows of ``W`` and one of ``split_k`` slices of K and walks its slice
in ``block_k`` steps. M <= 2 multiplies element-wise into a (M, block_n, block_k) float32
accumulator reduced once at the end (no tensor cores for one row); larger M pads the rows to 16
and uses ``tl.dot``. ``default_config`` picks the tiling from the shape alone (see its docstring);
``tools/gpu/fast_kernels.py --sweep`` measures the alternatives.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinge.devices import num_sms

MAX_ROWS = 16
DTYPES = (torch.float16, torch.bfloat16)
REDUCE_BLOCK = 1024


@dataclass(frozen=True)
class GemvConfig:
    """One tiling: rows of W per program, K per step, K slices, warps, tensor cores or not."""

    block_n: int = 16
    block_k: int = 512
    split_k: int = 1
    num_warps: int = 4
    dot: bool = False
    num_stages: int = 3


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_os, stride_om, k_per_split,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 USE_DOT: tl.constexpr, EVEN_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # clamp instead of masking the loads: rows past M or N re-read a valid row, never stored
    rows_m = tl.minimum(offs_m, M - 1)
    rows_n = tl.minimum(offs_n, N - 1).to(tl.int64)
    x_rows = x_ptr + rows_m[:, None] * stride_xm
    w_rows = w_ptr + rows_n[:, None] * K
    k_start = pid_k * k_per_split
    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc3 = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, k_per_split, BLOCK_K):
        ks = k_start + k0 + offs_k
        if EVEN_K:
            x = tl.load(x_rows + ks[None, :])
            w = tl.load(w_rows + ks[None, :], eviction_policy="evict_first")
        else:
            in_k = ks < K
            x = tl.load(x_rows + ks[None, :], mask=in_k[None, :], other=0.0)
            w = tl.load(w_rows + ks[None, :], mask=in_k[None, :], other=0.0, eviction_policy="evict_first")
        if USE_DOT:
            acc = tl.dot(x, tl.trans(w), acc)
        else:
            acc3 += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
    if not USE_DOT:
        acc = tl.sum(acc3, axis=2)
    out = out_ptr + pid_k * stride_os + offs_m[:, None] * stride_om + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _reduce_kernel(part_ptr, out_ptr, N, stride_ps, stride_pm, stride_om,
                   SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    m = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):  # split order: the same bits every run
        acc += tl.load(part_ptr + s * stride_ps + m * stride_pm + offs, mask=mask, other=0.0)
    tl.store(out_ptr + m * stride_om + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def supports(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether ``gemv(x, w)`` takes these: x (M, K) with 1 <= M <= ``MAX_ROWS`` and unit last
    stride, w (N, K) contiguous, one dtype of ``DTYPES``, same device."""
    return (x.dim() == 2 and w.dim() == 2 and 1 <= x.shape[0] <= MAX_ROWS
            and x.shape[1] == w.shape[1] and x.dtype == w.dtype and x.dtype in DTYPES
            and x.stride(-1) == 1 and w.is_contiguous() and x.device == w.device)


def split_k_for(tiles: int, steps: int, programs_per_sm: int, num_sms: int) -> int:
    """The smallest power of two of K slices giving ``tiles`` row tiles at least
    ``programs_per_sm`` programs per SM, keeping at least two K steps (of ``steps``) per slice."""
    split = 1
    while tiles * split < programs_per_sm * num_sms and steps // (split * 2) >= 2:
        split *= 2
    return split


@functools.cache
def default_config(m: int, n: int, k: int, num_sms: int = 132) -> GemvConfig:
    """The tiling chosen by reasoning, for an H100/H200-class GPU (no autotuning).

    - M <= 2: element-wise, ``block_k`` 512 (16 B vector loads, 4 per thread per row of W),
      ``block_n`` 16 / M, so the accumulator stays at 64 float32 registers per thread (4 warps).
    - M > 2: ``tl.dot`` with rows padded to 16, ``block_n`` 16, ``block_k`` 256, 3 stages in flight.
    - ``split_k``: the smallest power of two giving at least 3 programs per SM (HBM needs tens of
      KB in flight per SM; one program has one or a few 16 KB tiles in flight), keeping at least
      two ``block_k`` steps per slice. 4096x4096 and 4096x12288 split 2-4; 24576x4096 does not.
    """
    if m <= 2:
        block_n, block_k, dot = 16 // max(1, triton.next_power_of_2(m)), 512, False
    else:
        block_n, block_k, dot = 16, 256, True
    split = split_k_for(-(-n // block_n), -(-k // block_k), 3, num_sms)
    return GemvConfig(block_n=block_n, block_k=block_k, split_k=split, dot=dot)


def gemv(x: torch.Tensor, w: torch.Tensor, config: GemvConfig | None = None) -> torch.Tensor:
    """``x @ w.T`` (M, N) in ``x``'s dtype; ``config`` overrides ``default_config`` (benchmarks)."""
    if not supports(x, w):
        raise ValueError(
            f"gemv takes x (M<={MAX_ROWS}, K) with unit last stride and w (N, K) contiguous of one "
            f"dtype in {DTYPES}; got x {tuple(x.shape)} {x.dtype} stride {x.stride()}, "
            f"w {tuple(w.shape)} {w.dtype}; check gemv.supports first and use F.linear otherwise")
    m, k = x.shape
    n = w.shape[0]
    cfg = config or default_config(m, n, k, num_sms(x.device))
    block_m = 16 if cfg.dot else max(1, triton.next_power_of_2(m))
    k_per_split = triton.cdiv(triton.cdiv(k, cfg.block_k), cfg.split_k) * cfg.block_k
    even_k = k_per_split * cfg.split_k == k
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, cfg.block_n), cfg.split_k)
    meta = dict(BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, USE_DOT=cfg.dot,
                EVEN_K=even_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if cfg.split_k == 1:
        _gemv_kernel[grid](x, w, out, m, n, k, x.stride(0), 0, out.stride(0), k_per_split, **meta)
        return out
    part = torch.empty(cfg.split_k, m, n, dtype=torch.float32, device=x.device)
    _gemv_kernel[grid](x, w, part, m, n, k, x.stride(0), part.stride(0), part.stride(1), k_per_split,
                       **meta)
    _reduce_kernel[(m, triton.cdiv(n, REDUCE_BLOCK))](
        part, out, n, part.stride(0), part.stride(1), out.stride(0),
        SPLIT_K=cfg.split_k, BLOCK=REDUCE_BLOCK, num_warps=4)
    return out
