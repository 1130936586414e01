"""An experimental W4A16 decode GEMV (M <= 16) with the weights as the tensor cores' A operand:
``acc (N, M) = W (N, K) @ x^T (K, M)``, fp16 operands, float32 accumulation.

    y[m, n] = (sum_k x[m, k] * e2m1(q[n, k]) * sw[n, k/16]) * row_scale[n]  (+ bias[n])

The contract of ``triton_gemv.nvfp4_gemv`` (same arguments; x in bf16/fp16/fp32), reached only
through ``GemvConfig(dot="wa")``: the default tilings stay as they are until the H200 sweep
(``tools/gpu/nvfp4_gemm.py --sweep``) times this against them. Why it might be faster
(docs/nvfp4.md): the decoded codes never widen to float32 (no per-code conversion and FMA on
the CUDA cores), and the weight rows fill the MMA's 64-row M side while the few activation rows
take its narrow N side.

- Codes: the lop3 pairs of ``triton_gemv`` give ``e2m1 * 2^-14`` as fp16; the block scale as
  fp16 ``e4m3 * 2^7`` (at most 57344); their product ``e2m1 * e4m3 * 2^-7`` is exact in fp16
  (at most 21 in size, a multiple of 2^-17).
- Positions: a word's 8 codes come out as positions 0..7 in separate tiles, so the kernel runs
  8 dots of ``K / 8`` each against the activations of the same positions (a permutation of the
  sum over K: no join back into K order).
- Activations: fp16 overflows above 65504 where bf16 does not, so ``_prescale_kernel`` first
  writes each row times ``2^-e`` (``e >= 0``, the smallest that brings its largest value below
  2^15) as fp16, and the result is scaled back by ``2^(e + 7)``: exact powers of two, so only
  the bf16 -> fp16 rounding of tiny values (below 2^-24 after the prescale) is lost.
- Split-K writes float32 partials (already times ``2^(e + 7)``) reduced by ``triton_gemv``'s
  ordered second pass; no atomics, no host syncs (graph-capturable).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge_nvfp4 import triton_gemv
from hinge_nvfp4.triton_gemv import GemvConfig

ROWS = 16  #: activation rows per call at most (the MMA's N side, padded)
MIN_BLOCK_K = 128  #: 8 positions x the fp16 MMA's K of 16


@triton.jit
def _prescale_kernel(x_ptr, x16_ptr, exp_ptr, K, stride_x, stride_x16, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = tl.zeros((BLOCK,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        offs = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    top = tl.max(amax, axis=0)
    # floor(log2(top)) from the float32 exponent field; e = that - 14 (at least 0) puts the row
    # below 2^15; the scale 2^-e is built from its bits (exact)
    e = tl.maximum(((top.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127 - 14, 0)
    inv = ((127 - e) << 23).to(tl.float32, bitcast=True)
    tl.store(exp_ptr + row, e)
    for k0 in range(0, K, BLOCK):
        offs = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
        tl.store(x16_ptr + row * stride_x16 + offs, (x * inv).to(tl.float16), mask=offs < K)


@triton.jit
def _codes_f16(words, POS: tl.constexpr):
    """uint32 words of 8 codes -> (code POS, code POS + 4) of each word as fp16 ``e2m1 * 2^-14``."""
    s = words << (12 - 4 * POS)
    h2 = (s & 0x80008000) | ((s >> 3) & 0x0E000E00)
    lo = h2.to(tl.uint16).to(tl.float16, bitcast=True)
    hi = (h2 >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    return lo, hi


@triton.jit
def _position_dot(acc, w, x_cols, x_rows, POS: tl.constexpr, mask_w):
    """``acc += w (N, W) @ x[:, 8 w + POS]^T``: the activations of one code position."""
    xt = tl.load(x_rows + (x_cols * 8 + POS)[:, None], mask=mask_w[:, None], other=0.0)
    return tl.dot(w, xt, acc)


@triton.jit
def _nvfp4_gemv_wa_kernel(
    x16_ptr, exp_ptr, w_ptr, s_ptr, rs_ptr, bias_ptr, out_ptr,
    M, N, K, stride_x16, stride_wn, stride_sn, stride_os, stride_om, k_per_split,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
):
    BLOCK_W: tl.constexpr = BLOCK_K // 8
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_w = tl.arange(0, BLOCK_W)
    rows_m = tl.minimum(offs_m, M - 1)  # rows past M re-read row M - 1 and are never stored
    offs_n, rows_n, w_rows, s_rows = triton_gemv._weight_rows(w_ptr, s_ptr, N, stride_wn,
                                                              stride_sn, BLOCK_N)
    k_start = pid_k * k_per_split
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, k_per_split, BLOCK_K):
        kk = k_start + k0
        words, sbits, ok_w = triton_gemv._load_step(w_rows, s_rows, kk, K, BLOCK_K, EVEN_K)
        # e4m3 bits << 7 as fp16 = scale * 2^-8; times 2^15 (exact): scale * 2^7; one per word
        sc = (((sbits.to(tl.uint16) & 0x7F) << 7).to(tl.float16, bitcast=True) * 32768.0).to(tl.float16)
        sw = tl.reshape(tl.join(sc, sc), (BLOCK_N, BLOCK_W))
        x_rows = x16_ptr + rows_m[None, :] * stride_x16 + kk
        for pos in tl.static_range(4):  # codes pos and pos + 4 of every word, each its own dot
            lo, hi = _codes_f16(words, pos)
            acc = _position_dot(acc, lo * sw, offs_w, x_rows, pos, ok_w)
            acc = _position_dot(acc, hi * sw, offs_w, x_rows, pos + 4, ok_w)
    # back from the prescale and the scale's 2^7: 2^(e + 7), exact
    e = tl.load(exp_ptr + rows_m)
    acc = acc * ((e + 7 + 127) << 23).to(tl.float32, bitcast=True)[None, :]
    mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
    if EPILOGUE:
        acc = acc * tl.load(rs_ptr + rows_n)[:, None]
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + rows_n).to(tl.float32)[:, None]
    tl.store(out_ptr + pid_k * stride_os + offs_m[None, :] * stride_om + offs_n[:, None],
             acc.to(out_ptr.dtype.element_ty), mask=mask)


def supports(x: torch.Tensor, packed: torch.Tensor) -> bool:
    """What ``triton_gemv.supports`` takes (K a multiple of 16: a ragged last block is masked by
    whole words), at most ``ROWS`` rows."""
    return triton_gemv.supports(x, packed) and x.shape[0] <= ROWS


def nvfp4_gemv_wa(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                  row_scale: torch.Tensor, bias: torch.Tensor | None, *,
                  out_dtype: torch.dtype | None = None, config: GemvConfig) -> torch.Tensor:
    """x (M <= 16, K), packed (N, K/2) uint8, scales (N, K/16) fp8, row_scale (N,) float32 ->
    (M, N) in ``out_dtype`` (x's by default), with ``config.block_n`` (a multiple of 64: the
    MMA's rows), ``config.block_k`` (a power of two >= 128), ``split_k`` and ``num_warps``."""
    if not supports(x, packed):
        raise ValueError(f"nvfp4_gemv_wa takes what nvfp4_gemv takes (x of at most {ROWS} rows); "
                         f"got x {tuple(x.shape)} {x.dtype}, packed {tuple(packed.shape)}")
    if config.block_k < MIN_BLOCK_K or config.block_k & (config.block_k - 1) or config.block_n % 64:
        raise ValueError(f"GemvConfig(dot='wa') needs block_k a power of two >= {MIN_BLOCK_K} and "
                         f"block_n a multiple of 64, got {config}")
    m, k = x.shape
    n = packed.shape[0]
    x16 = torch.empty(m, k, dtype=torch.float16, device=x.device)
    exps = torch.empty(m, dtype=torch.int32, device=x.device)
    _prescale_kernel[(m,)](x, x16, exps, k, x.stride(0), x16.stride(0), BLOCK=1024, num_warps=4)
    words = packed.view(torch.int32)
    sbits = scales.view(torch.uint8)
    k_per_split = triton.cdiv(triton.cdiv(k, config.block_k), config.split_k) * config.block_k
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    split = config.split_k > 1
    part = torch.empty(config.split_k, m, n, dtype=torch.float32, device=x.device) if split else out
    _nvfp4_gemv_wa_kernel[(triton.cdiv(n, config.block_n), config.split_k)](
        x16, exps, words, sbits, row_scale, bias if bias is not None else row_scale, part,
        m, n, k, x16.stride(0), words.stride(0), sbits.stride(0),
        part.stride(0) if split else 0, part.stride(-2), k_per_split,
        HAS_BIAS=bias is not None, EPILOGUE=not split,
        EVEN_K=k_per_split * config.split_k == k, BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, BLOCK_M=ROWS, num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    if split:  # NOTE: through the module, so that tests can hand in an interpreted one
        triton_gemv._reduce_kernel[(m, triton.cdiv(n, triton_gemv.REDUCE_BLOCK))](
            part, row_scale, bias if bias is not None else row_scale, out, n,
            part.stride(0), part.stride(1), out.stride(0), HAS_BIAS=bias is not None,
            SPLIT_K=config.split_k, BLOCK=triton_gemv.REDUCE_BLOCK, num_warps=4)
    return out
