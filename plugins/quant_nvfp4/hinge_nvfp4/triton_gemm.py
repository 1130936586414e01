"""The W4A16 fused dequant GEMM in Triton (Hopper; any CUDA GPU Triton supports).

    y[m, n] = (sum_k x[m, k] * e2m1(q[n, k]) * sw[n, k/16]) * row_scale[n]  (+ bias[n])

Each program owns a BLOCK_M x BLOCK_N tile of y and walks K in BLOCK_K steps: it reads
BLOCK_N x BLOCK_K/2 bytes of packed codes and BLOCK_N x BLOCK_K/16 fp8 scales (the weights are
read once from HBM, never written dequantized), decodes them in registers (the fp32 bits of a
magnitude code m >= 2 are ``0x3F000000 + (m << 22)``; the fp8 E4M3 scale is rebuilt from its
bits), multiplies (exact in bf16: 2 + 4 significant bits), and accumulates ``x @ w^T`` in
float32 on the tensor cores. The epilogue applies the per-row global scale and the bias in
float32 and rounds once.

Default mode hands decode sizes (M <= 16, ``triton_gemv.supports``) to ``triton_gemv.nvfp4_gemv``
(word-wise decode, per-group scales, split-K with an ordered second pass); otherwise it picks the
tile by M (narrow BLOCK_M and, when the tiles alone do not fill the GPU, split-K: partial sums in a
float32 workspace, summed in a fixed order).
Deterministic mode uses one tile configuration for every M and no split-K, so a row's result
does not depend on the batch. No host sync: capturable in a CUDA graph.

At prefill sizes the fused GEMM decodes every weight once a BLOCK_M of rows (the H100's table,
2026-12-06: 2.4-5.6x slower than bf16 at M = 64 and 256). ``nvfp4_linear_dequantized`` instead
writes the weight once as ``e2m1 * scale * row_scale`` rounded to x's dtype (``dequantize_weight``:
one pass, into a caller's buffer) and calls cuBLAS (``torch.addmm``): a bf16 checkpoint's
rounding of the weight, then bf16 GEMM speed plus the pass (``NVFP4Options.prefill_dequant_rows``
says from which M: 64 by default, where the H100 measured the crossover).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinge.devices import num_sms
from hinge_nvfp4 import triton_gemv


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3


DETERMINISTIC = Tile(64, 64, 128)  #: every M, no split-K (batch invariant)


def pick_tile(m: int, n: int, k: int, deterministic: bool, num_sms: int = 132) -> Tile:
    """The tile for an (m, n, k) problem. Decode sizes: 16-row tiles; split K while the tiles
    alone give fewer programs than SMs (and K leaves at least 2 steps per split)."""
    if deterministic:
        return DETERMINISTIC
    if m <= 16:
        tile = Tile(16, 64, 128, num_warps=4, num_stages=4)
    elif m <= 64:
        tile = Tile(32, 64, 128, num_warps=4, num_stages=4)
    else:
        tile = Tile(64, 128, 64, num_warps=8, num_stages=3)
    programs = triton.cdiv(m, tile.block_m) * triton.cdiv(n, tile.block_n)
    split = 1
    while programs * split < num_sms and k // (tile.block_k * split * 2) >= 2:
        split *= 2
    return Tile(tile.block_m, tile.block_n, tile.block_k, split, tile.num_warps, tile.num_stages)


@triton.jit
def _decode_e2m1(codes):
    """uint8 codes (0..15) -> float32 values."""
    mag = (codes & 7).to(tl.int32)
    big = (0x3F000000 + (mag << 22)).to(tl.float32, bitcast=True)
    value = tl.where(mag >= 2, big, mag.to(tl.float32) * 0.5)
    return tl.where((codes & 8) != 0, -value, value)


@triton.jit
def _decode_e4m3(bits):
    """uint8 bits of non-negative fp8 E4M3 scales -> float32 (normal and subnormal)."""
    exp = ((bits >> 3) & 15).to(tl.int32)
    man = (bits & 7).to(tl.int32)
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    return tl.where(exp == 0, man.to(tl.float32) * 0.001953125, normal)  # 2^-9


@triton.jit
def _weight_tile(w_ptr, s_ptr, offs_n, mask_n, k0, K, stride_wn, stride_wk, stride_sn, stride_sk,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """float32 ``e2m1(q) * sw`` of W's rows ``offs_n``, columns k0 .. k0 + BLOCK_K - 1 (exact;
    zero past N or K): the weight side of the GEMM's K step and of ``dequantize_weight``."""
    offs_b = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    offs_s = k0 // 16 + tl.arange(0, BLOCK_K // 16)
    packed = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_b[None, :] * stride_wk,
                     mask=mask_n[:, None] & (offs_b < K // 2)[None, :], other=0)
    codes = tl.reshape(tl.join(packed & 15, packed >> 4), (BLOCK_N, BLOCK_K))
    sbits = tl.load(s_ptr + offs_n[:, None] * stride_sn + offs_s[None, :] * stride_sk,
                    mask=mask_n[:, None] & (offs_s < K // 16)[None, :], other=0)
    scale = tl.reshape(tl.broadcast_to(_decode_e4m3(sbits)[:, :, None], (BLOCK_N, BLOCK_K // 16, 16)),
                       (BLOCK_N, BLOCK_K))
    return _decode_e2m1(codes) * scale


@triton.jit
def _w4a16_kernel(
    x_ptr, w_ptr, s_ptr, rs_ptr, bias_ptr, out_ptr, ws_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sk, stride_om, stride_on,
    HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // num_n, pid % num_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m, mask_n = offs_m < M, offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(steps, SPLIT_K)
    for step in range(pid_k * per_split, tl.minimum(steps, (pid_k + 1) * per_split)):
        k0 = step * BLOCK_K
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                    mask=mask_m[:, None] & ((k0 + offs_k)[None, :] < K), other=0.0)
        w = _weight_tile(w_ptr, s_ptr, offs_n, mask_n, k0, K, stride_wn, stride_wk, stride_sn, stride_sk,
                         BLOCK_N, BLOCK_K).to(a.dtype)
        if IEEE:
            acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, tl.trans(w), acc)
    if SPLIT_K == 1:
        acc = acc * tl.load(rs_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
                 acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
    else:
        tl.store(ws_ptr + (pid_k * M + offs_m[:, None]) * N + offs_n[None, :], acc,
                 mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, rs_ptr, out_ptr, N, K, stride_wn, stride_wk, stride_sn, stride_sk,
                    stride_on, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    rs = tl.load(rs_ptr + offs_n, mask=mask_n, other=0.0)
    w = _weight_tile(w_ptr, s_ptr, offs_n, mask_n, pid_k * BLOCK_K, K, stride_wn, stride_wk, stride_sn,
                     stride_sk, BLOCK_N, BLOCK_K) * rs[:, None]  # e2m1 * scale exact, one rounding
    tl.store(out_ptr + offs_n[:, None] * stride_on + offs_k[None, :], w.to(out_ptr.dtype.element_ty),
             mask=mask_n[:, None] & (offs_k < K)[None, :])


DEQUANT_BLOCK = (32, 128)  #: (rows, columns) of W a program of ``dequantize_weight`` writes


def dequantize_weight(packed: torch.Tensor, scales: torch.Tensor, row_scale: torch.Tensor,
                      out: torch.Tensor) -> torch.Tensor:
    """``out`` (N, K), contiguous, bf16 or fp16 = ``e2m1(q) * sw * row_scale`` (float32, then
    rounded once), from packed (N, K/2) uint8 codes, scales (N, K/16) fp8 and row_scale (N,)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    if out.shape != (n, k) or not out.is_contiguous() or out.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dequantize_weight writes a contiguous ({n}, {k}) bf16 or fp16 tensor, got "
                         f"{tuple(out.shape)} {out.dtype}")
    sbits = scales.view(torch.uint8)
    block_n, block_k = DEQUANT_BLOCK
    _dequant_kernel[(triton.cdiv(n, block_n), triton.cdiv(k, block_k))](
        packed, sbits, row_scale, out, n, k, packed.stride(0), packed.stride(1), sbits.stride(0),
        sbits.stride(1), out.stride(0), BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4)
    return out


def nvfp4_linear_dequantized(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                             row_scale: torch.Tensor, bias: torch.Tensor | None,
                             buffer: torch.Tensor) -> torch.Tensor:
    """x (M, K) bf16 or fp16 -> (M, N) in x's dtype: the weight dequantized with its row scale
    into ``buffer`` (at least N x K x 2 bytes, any dtype: viewed as x's), then ``x @ W^T (+ bias)``
    by cuBLAS. No host sync: capturable in a CUDA graph."""
    n, k = packed.shape[0], packed.shape[1] * 2
    if x.dtype not in (torch.bfloat16, torch.float16) or buffer.numel() * buffer.element_size() < 2 * n * k:
        raise ValueError(f"nvfp4_linear_dequantized takes bf16/fp16 x and a buffer of >= {2 * n * k} "
                         f"bytes; got {x.dtype} and {buffer.numel() * buffer.element_size()} bytes")
    return times_weight(x, dequantize_weight(packed, scales, row_scale, weight_view(buffer, n, k, x.dtype)), bias)


def weight_view(buffer: torch.Tensor, n: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """The first N x K elements of ``buffer`` (any dtype, contiguous) as an (N, K) ``dtype`` weight."""
    return buffer.view(-1).view(dtype)[: n * k].view(n, k)


def times_weight(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ w^T (+ bias)`` by cuBLAS, in x's dtype (w's too)."""
    return torch.addmm(bias.to(x.dtype), x, w.t()) if bias is not None else torch.mm(x, w.t())


def nvfp4_linear(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, row_scale: torch.Tensor,
                 bias: torch.Tensor | None, *, deterministic: bool = False,
                 out_dtype: torch.dtype | None = None, tile: Tile | None = None) -> torch.Tensor:
    """x (M, K) in bf16/fp16/fp32, packed (N, K/2) uint8, scales (N, K/16) fp8, row_scale (N,)
    fp32 -> (M, N) in ``out_dtype`` (x's by default). ``tile`` forces this module's GEMM tiles
    (tests, benchmarks); without it, default mode runs M <= 16 through ``triton_gemv``."""
    if tile is None and not deterministic and triton_gemv.supports(x, packed):
        return triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, out_dtype=out_dtype)
    m, k = x.shape
    n = packed.shape[0]
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    if m == 0:
        return out
    if tile is None:
        tile = pick_tile(m, n, k, deterministic, num_sms(x.device))
    sbits = scales.view(torch.uint8)
    ws = torch.empty(tile.split_k, m, n, dtype=torch.float32, device=x.device) if tile.split_k > 1 else out
    grid = (triton.cdiv(m, tile.block_m) * triton.cdiv(n, tile.block_n), tile.split_k)
    _w4a16_kernel[grid](
        x, packed, sbits, row_scale, bias if bias is not None else row_scale, out, ws,
        m, n, k,
        x.stride(0), x.stride(1), packed.stride(0), packed.stride(1), sbits.stride(0), sbits.stride(1),
        out.stride(0), out.stride(1),
        HAS_BIAS=bias is not None, SPLIT_K=tile.split_k, IEEE=x.dtype == torch.float32,
        BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    if tile.split_k > 1:  # NOTE: summed in split order, then the epilogue: no atomics
        acc = ws.sum(dim=0) * row_scale
        if bias is not None:
            acc = acc + bias.float()
        out.copy_(acc)
    return out
