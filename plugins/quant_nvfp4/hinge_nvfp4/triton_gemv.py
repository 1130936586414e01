"""The W4A16 decode-size GEMV (M <= 16) in Triton: what ``triton_gemm.nvfp4_linear`` runs in default
mode for a few rows.

    y[m, n] = (sum_k x[m, k] * e2m1(q[n, k]) * sw[n, k/16]) * row_scale[n]  (+ bias[n])

Same contract as ``triton_gemm``: x (M, K) in bf16/fp16/fp32 with a unit last stride, packed
(N, K/2) uint8 (low nibble = even k), scales (N, K/16) fp8 E4M3 (non-negative), row_scale (N,)
float32; sums in float32, row scale and bias in float32, one rounding to the output dtype. Not
batch invariant (the tiling and the split depend on M), deterministic run to run: a split-K
configuration writes float32 partial sums and a second kernel adds them in split order (no
atomics). No host syncs: capturable in a CUDA graph.

How it streams (the cost at M <= 16 is decoding, not multiplying; cf. Marlin's lop3 decode):

- One program owns ``block_n`` rows of W and one of ``split_k`` slices of K. The codes are read as
  int32 words (8 codes, 16 B vector loads per thread, whole rows contiguous), never unpacked byte
  by byte: ``(s & 0x80008000) | ((s >> 3) & 0x0E000E00)`` with ``s = word << (12 - 4i)`` turns
  codes i and i + 4 of a word into the two halves of an fp16x2 word whose values are
  ``e2m1 * 2^-14`` (e2m1 is fp16 with a 2-bit exponent; its subnormals land on fp16 subnormals,
  which the fp16 -> fp32 conversion keeps exactly). So a code costs ~2 integer ops + 1 conversion.
- The fp8 scale is decoded the same way (``bits << 7`` as fp16 = ``e4m3 * 2^-8``, subnormals
  included) once per 16-code group, times 2^22 (exact), so ``code * scale`` comes out exact.
- M <= 2 (``dot=False``): CUDA-core FMAs. The activations are loaded 8 at a time and split into the
  8 code positions of a word (``tl.split``, in registers); each word's 8 products are summed, two
  words make a group, the group's sum is multiplied by its scale once, float32 all the way.
- Larger M (``dot=True``): the decoded codes times their scales (exact in bf16: 2 + 4
  significant bits) are joined back into K order and fed to ``tl.dot`` with the rows padded to 16
  (float32 accumulation on the tensor cores).

``default_config`` picks the tiling from the shape alone; ``tools/gpu/nvfp4_gemm.py --sweep``
measures alternatives on the GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinge.devices import num_sms
from hinge.layers.fast_triton.gemv import split_k_for

MAX_ROWS = 16
REDUCE_BLOCK = 1024
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class GemvConfig:
    """One tiling: rows of W per program, K per step (a multiple of 32), K slices, warps, tensor
    cores or not (``dot``: False = CUDA cores, True = ``tl.dot`` of x and W), pipeline depth,
    hand prefetch."""

    block_n: int = 8
    block_k: int = 512
    split_k: int = 1
    num_warps: int = 2
    dot: bool = False
    num_stages: int = 3
    #: load each K step's codes, scales and activations one step ahead, by hand (the same
    #: arithmetic, so the same bits): Triton's pipeliner leaves this loop's loads alone
    prefetch: bool = False
    #: ``words``: this module's kernel; ``groups``: ``triton_gemv_groups`` (one row of x, CUDA
    #: cores: codes, scales and sums in the scale groups' layout, no shared memory in the loop);
    #: other shapes take ``words``
    layout: str = "words"


@triton.jit
def _e2m1_pair(words, POS: tl.constexpr):
    """uint32 words of 8 codes -> (code POS, code POS + 4) of each word as float32 ``e2m1 * 2^-14``."""
    s = words << (12 - 4 * POS)
    h2 = (s & 0x80008000) | ((s >> 3) & 0x0E000E00)  # fp16x2: sign, 2-bit exponent, 1-bit mantissa
    lo = h2.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    hi = (h2 >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def _e4m3_scaled(bits):
    """uint8 bits of non-negative fp8 E4M3 scales -> float32 ``scale * 2^14`` (exact)."""
    h = (bits.to(tl.uint16) & 0x7F) << 7  # fp16 bits of scale * 2^-8, subnormals included
    return h.to(tl.float16, bitcast=True).to(tl.float32) * 4194304.0  # 2^22


@triton.jit
def _weight_rows(w_ptr, s_ptr, N, stride_wn, stride_sn, BLOCK_N: tl.constexpr):
    """This program's ``BLOCK_N`` rows of W: (row ids, code-word and scale row pointers); rows
    past N clamp to row N - 1 (re-read, never stored)."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_n = tl.minimum(offs_n, N - 1).to(tl.int64)
    return offs_n, rows_n, w_ptr + rows_n[:, None] * stride_wn, s_ptr + rows_n[:, None] * stride_sn


@triton.jit
def load_columns(rows, cols, ok, EVEN_K: tl.constexpr):
    """``rows[:, cols]`` (row pointers (R, 1), columns (C,)), streamed once (evict first); zeros
    where not ``ok`` (a ragged last K step) unless ``EVEN_K``."""
    if EVEN_K:
        return tl.load(rows + cols[None, :], eviction_policy="evict_first")
    return tl.load(rows + cols[None, :], mask=ok[None, :], other=0, eviction_policy="evict_first")


@triton.jit
def _load_step(w_rows, s_rows, kk, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """K step ``kk``'s code words (uint32, 8 codes each) and fp8 scale bits of the rows, and
    which words exist (a ragged last step reads zeros past K)."""
    ws = kk // 8 + tl.arange(0, BLOCK_K // 8)
    gs = kk // 16 + tl.arange(0, BLOCK_K // 16)
    ok_w = ws < K // 8
    words = load_columns(w_rows, ws, ok_w, EVEN_K)
    sbits = load_columns(s_rows, gs, gs < K // 16, EVEN_K)
    return words.to(tl.uint32, bitcast=True), sbits, ok_w


@triton.jit
def _load_x(x_rows, kk, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """K step ``kk``'s activations of the rows (zeros past K)."""
    ks = kk + tl.arange(0, BLOCK_K)
    if EVEN_K:
        return tl.load(x_rows + ks[None, :])
    return tl.load(x_rows + ks[None, :], mask=(ks < K)[None, :], other=0.0)


@triton.jit
def accumulate(acc, x, words, sbits, USE_DOT: tl.constexpr, IEEE: tl.constexpr):
    """One K step: ``acc`` plus x (BLOCK_M, BLOCK_K) times the step's rows of W, decoded from
    ``words`` (BLOCK_N, BLOCK_K / 8) uint32 and fp8 scale ``sbits`` (BLOCK_N, BLOCK_K / 16).
    ``USE_DOT``: ``acc`` is (BLOCK_M, BLOCK_N), summed by ``tl.dot``; else (BLOCK_M, BLOCK_N,
    GROUPS), one float32 sum a scale group on the CUDA cores (``tl.sum`` over groups at the end)."""
    BLOCK_M: tl.constexpr = x.shape[0]
    BLOCK_N: tl.constexpr = words.shape[0]
    BLOCK_W: tl.constexpr = words.shape[1]  # int32 words (8 codes) per row per step
    BLOCK_K: tl.constexpr = BLOCK_W * 8
    GROUPS: tl.constexpr = BLOCK_W // 2  # fp8 scales per row per step
    scale = _e4m3_scaled(sbits)  # (BLOCK_N, GROUPS)
    c0, c4 = _e2m1_pair(words, 0)
    c1, c5 = _e2m1_pair(words, 1)
    c2, c6 = _e2m1_pair(words, 2)
    c3, c7 = _e2m1_pair(words, 3)
    if USE_DOT:
        # per word scale (two words per group), codes * scale exact in x's dtype, K order back
        sw = tl.reshape(tl.join(scale, scale), (BLOCK_N, BLOCK_W))
        ty = x.dtype
        w = tl.join(tl.join(tl.join((c0 * sw).to(ty), (c4 * sw).to(ty)),
                            tl.join((c2 * sw).to(ty), (c6 * sw).to(ty))),
                    tl.join(tl.join((c1 * sw).to(ty), (c5 * sw).to(ty)),
                            tl.join((c3 * sw).to(ty), (c7 * sw).to(ty))))
        w = tl.reshape(w, (BLOCK_N, BLOCK_K))  # element 8 * word + 4a + 2b + c
        if IEEE:
            acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    else:
        # x's 8 elements of a word, split into the positions the pairs decode to
        xa, xb = tl.split(tl.reshape(x.to(tl.float32), (BLOCK_M, BLOCK_W, 2, 2, 2)))
        xaa, xab = tl.split(xa)
        xba, xbb = tl.split(xb)
        x0, x4 = tl.split(xaa)
        x2, x6 = tl.split(xab)
        x1, x5 = tl.split(xba)
        x3, x7 = tl.split(xbb)
        part = (x0[:, None, :] * c0[None, :, :] + x1[:, None, :] * c1[None, :, :]
                + x2[:, None, :] * c2[None, :, :] + x3[:, None, :] * c3[None, :, :]
                + x4[:, None, :] * c4[None, :, :] + x5[:, None, :] * c5[None, :, :]
                + x6[:, None, :] * c6[None, :, :] + x7[:, None, :] * c7[None, :, :])
        group = tl.sum(tl.reshape(part, (BLOCK_M, BLOCK_N, GROUPS, 2)), axis=3)
        acc += group * scale[None, :, :]
    return acc


@triton.jit
def _nvfp4_gemv_kernel(
    x_ptr, w_ptr, s_ptr, rs_ptr, bias_ptr, out_ptr,
    M, N, K, stride_xm, stride_wn, stride_sn, stride_os, stride_om, k_per_split,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr,
    USE_DOT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    GROUPS: tl.constexpr = BLOCK_K // 16  # fp8 scales per row per step
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    # clamp instead of masking: rows past M or N re-read a valid row and are never stored
    rows_m = tl.minimum(offs_m, M - 1)
    offs_n, rows_n, w_rows, s_rows = _weight_rows(w_ptr, s_ptr, N, stride_wn, stride_sn, BLOCK_N)
    x_rows = x_ptr + rows_m[:, None] * stride_xm
    k_start = pid_k * k_per_split
    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N, GROUPS), dtype=tl.float32)
    if PREFETCH:  # the first step's loads before the loop (Triton pipelines none of these)
        next_words, next_sbits, _ = _load_step(w_rows, s_rows, k_start, K, BLOCK_K, EVEN_K)
        next_x = _load_x(x_rows, k_start, K, BLOCK_K, EVEN_K)
    for k0 in range(0, k_per_split, BLOCK_K):
        kk = k_start + k0
        if PREFETCH:
            # this step's codes came a step ago; the next step's loads go out before the math,
            # so they are in flight while it runs (the last step re-reads itself: in cache)
            words, sbits, x = next_words, next_sbits, next_x
            nk = tl.minimum(kk + BLOCK_K, k_start + k_per_split - BLOCK_K)
            next_words, next_sbits, _ = _load_step(w_rows, s_rows, nk, K, BLOCK_K, EVEN_K)
            next_x = _load_x(x_rows, nk, K, BLOCK_K, EVEN_K)
        else:
            words, sbits, _ = _load_step(w_rows, s_rows, kk, K, BLOCK_K, EVEN_K)
            x = _load_x(x_rows, kk, K, BLOCK_K, EVEN_K)
        acc = accumulate(acc, x, words, sbits, USE_DOT, IEEE)
    if not USE_DOT:
        acc = tl.sum(acc, axis=2)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if EPILOGUE:
        acc = acc * tl.load(rs_ptr + rows_n)[None, :]
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + rows_n).to(tl.float32)[None, :]
    tl.store(out_ptr + pid_k * stride_os + offs_m[:, None] * stride_om + offs_n[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _reduce_kernel(part_ptr, rs_ptr, bias_ptr, out_ptr, N, stride_ps, stride_pm, stride_om,
                   HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    m = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):  # split order: the same bits every run
        acc += tl.load(part_ptr + s * stride_ps + m * stride_pm + offs, mask=mask, other=0.0)
    acc = acc * tl.load(rs_ptr + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + m * stride_om + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def supports(x: torch.Tensor, packed: torch.Tensor) -> bool:
    """Whether ``nvfp4_gemv`` takes these: x (M, K) with 1 <= M <= ``MAX_ROWS``, a unit last
    stride and a dtype of ``DTYPES``; packed (N, K/2) uint8 with a unit last stride whose rows can
    be read as int32 words (row stride and storage offset multiples of 4 bytes)."""
    return (x.dim() == 2 and packed.dim() == 2 and 1 <= x.shape[0] <= MAX_ROWS and x.dtype in DTYPES
            and x.stride(-1) == 1 and packed.dtype == torch.uint8 and packed.stride(-1) == 1
            and x.shape[1] % 16 == 0 and packed.shape[1] * 2 == x.shape[1]
            and packed.stride(0) % 4 == 0 and packed.storage_offset() % 4 == 0)


@functools.cache
def default_config(m: int, n: int, k: int, num_sms: int = 132) -> GemvConfig:
    """The tiling the H200 sweep found fastest (``tools/gpu/nvfp4_gemm.py --sweep``; no autotuning).

    - M <= 2: CUDA-core FMAs, ``block_n`` 8, ``block_k`` 512 (256 B of codes per row per step), 2
      warps: 79 registers a thread and 24 resident warps per SM, where 32 rows on 4 warps took
      166 registers and 12 warps (latency bound: docs/nvfp4.md); 12-15% faster on every Qwen3-8B
      shape (docs/benchmarks.md, sixth session).
    - M > 2: ``tl.dot`` with the rows padded to 16, ``block_n`` 64, ``block_k`` 128, 4 warps.
    - ``split_k``: the smallest power of two giving at least 8 (CUDA cores) or 2 (``dot``)
      programs per SM, keeping at least two ``block_k`` steps per slice.
    """
    if m <= 2:
        block_n, block_k, dot, warps, per_sm = 8, 512, False, 2, 8
    else:
        block_n, block_k, dot, warps, per_sm = 64, 128, True, 4, 2
    split = split_k_for(-(-n // block_n), -(-k // block_k), per_sm, num_sms)
    return GemvConfig(block_n=block_n, block_k=block_k, split_k=split, num_warps=warps, dot=dot)


def _groups():
    """The ``layout="groups"`` kernel's module (imported on first use; tests interpret it)."""
    from hinge_nvfp4 import triton_gemv_groups

    return triton_gemv_groups


def nvfp4_gemv(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, row_scale: torch.Tensor,
               bias: torch.Tensor | None, *, out_dtype: torch.dtype | None = None,
               config: GemvConfig | None = None) -> torch.Tensor:
    """x (M <= 16, K), packed (N, K/2) uint8, scales (N, K/16) fp8, row_scale (N,) float32 ->
    (M, N) in ``out_dtype`` (x's by default); ``config`` overrides ``default_config``."""
    if not supports(x, packed):
        raise ValueError(
            f"nvfp4_gemv takes x (1..{MAX_ROWS}, K) with a unit last stride in {DTYPES} and packed "
            f"(N, K/2) uint8 readable as int32 words; got x {tuple(x.shape)} {x.dtype} stride "
            f"{x.stride()}, packed {tuple(packed.shape)} {packed.dtype} stride {packed.stride()} offset "
            f"{packed.storage_offset()}; check triton_gemv.supports first and use triton_gemm otherwise")
    m, k = x.shape
    n = packed.shape[0]
    cfg = config or default_config(m, n, k, num_sms(x.device))
    if cfg.block_k % 32 or cfg.block_k & (cfg.block_k - 1):
        raise ValueError(f"GemvConfig.block_k must be a power of two >= 32, got {cfg.block_k}")
    if cfg.layout not in ("words", "groups"):
        raise ValueError(f"GemvConfig.layout must be 'words' or 'groups', got {cfg.layout!r}")
    block_m = 16 if cfg.dot else max(1, triton.next_power_of_2(m))
    sbits = scales.view(torch.uint8)
    k_per_split = triton.cdiv(triton.cdiv(k, cfg.block_k), cfg.split_k) * cfg.block_k
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    split = cfg.split_k > 1
    part = torch.empty(cfg.split_k, m, n, dtype=torch.float32, device=x.device) if split else out
    even_k = k_per_split * cfg.split_k == k
    if (cfg.layout == "groups" and m == 1 and not cfg.dot and packed.stride(0) % 8 == 0
            and packed.storage_offset() % 8 == 0):  # rows readable as int64 groups
        _groups().launch(x, packed, sbits, row_scale, bias, part, k_per_split=k_per_split,
                         split=split, even_k=even_k, config=cfg)
    else:
        words = packed.view(torch.int32)
        _nvfp4_gemv_kernel[(triton.cdiv(n, cfg.block_n), cfg.split_k)](
            x, words, sbits, row_scale, bias if bias is not None else row_scale, part,
            m, n, k, x.stride(0), words.stride(0), sbits.stride(0),
            part.stride(0) if split else 0, part.stride(-2), k_per_split,
            HAS_BIAS=bias is not None, EPILOGUE=not split, IEEE=x.dtype == torch.float32,
            EVEN_K=even_k, USE_DOT=cfg.dot,
            BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PREFETCH=cfg.prefetch,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
    if split:
        _reduce_kernel[(m, triton.cdiv(n, REDUCE_BLOCK))](
            part, row_scale, bias if bias is not None else row_scale, out, n,
            part.stride(0), part.stride(1), out.stride(0),
            HAS_BIAS=bias is not None, SPLIT_K=cfg.split_k, BLOCK=REDUCE_BLOCK, num_warps=4)
    return out
