"""The W4A16 decode GEMV (M <= 16) that asks for all of its weights before it waits for x.

    y[m, n] = (sum_k x[m, k] * e2m1(q[n, k]) * sw[n, k/16]) * row_scale[n]  (+ bias[n])

Same contract and arithmetic as ``triton_gemv`` (its ``accumulate`` step, so the same sums in the
same order as its unsplit tiling with ``block_k`` = this kernel's step), laid out for
programmatic dependent launch (PDL): one program owns ``block_n`` whole rows of W, and

1. lets the next kernel launch at its start (``gdc_launch_dependents``);
2. issues the loads of *every* code word and scale of its rows, ``steps`` steps of ``block_k``
   (the whole K: no loop, no split), into registers;
3. only then waits for the kernel before it (``gdc_wait``), which wrote x;
4. loads x and does the arithmetic.

So in a chain of such launches a GEMV's weight stream starts while the kernel before it still
runs, and HBM never idles between them. Why (docs/nvfp4.md, twenty-first session): a plain read of
each Qwen3-8B shape's bytes launched this way reached 83-92% of the H100's 3.35 TB/s in a CUDA
graph, where the same read without PDL reached 54-84% and ``kernel: mma``, whose ring holds a few
steps before its wait, 46-78%.

The price is registers: a program holds ``block_n * K / 2`` bytes of codes and ``block_n * K /
16`` of scales at once (``block_n`` 16 at K = 4096: 36 KiB), so ``block_n`` and ``num_warps`` are
chosen to keep two kernels' programs resident on a multiprocessor. Not batch invariant (tiling by
M), deterministic run to run (no split, no atomics). Capturable in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinge_nvfp4.triton_gemv import (
    MAX_ROWS,
    _load_step,
    _load_x,
    _weight_rows,
    accumulate,
    supports,
)

MAX_STEPS = 64


@dataclass(frozen=True)
class EarlyConfig:
    """One tiling: whole rows of W per program, K per step (a power of two >= 32, ``steps`` of
    them make K), warps, tensor cores or not (``dot``), and whether to launch with PDL (``early``;
    off: the same kernel waited for by the stream, for an A/B)."""

    block_n: int = 16
    block_k: int = 4096
    num_warps: int = 8
    dot: bool = False
    early: bool = True


@triton.jit
def _early_gemv_kernel(
    x_ptr, w_ptr, s_ptr, rs_ptr, bias_ptr, out_ptr,
    M, N, K, stride_xm, stride_wn, stride_sn, stride_om,
    HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, USE_DOT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STEPS: tl.constexpr, EARLY: tl.constexpr,
):
    if EARLY:
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may launch now
    GROUPS: tl.constexpr = BLOCK_K // 16
    offs_n, rows_n, w_rows, s_rows = _weight_rows(w_ptr, s_ptr, N, stride_wn, stride_sn, BLOCK_N)
    # every step's weights asked for before the wait (unrolled: nothing waits for a load before
    # the last one is issued)
    words, sbits = (), ()
    for i in tl.static_range(STEPS):
        w, sb, _ = _load_step(w_rows, s_rows, i * BLOCK_K, K, BLOCK_K, True)
        words, sbits = words + (w,), sbits + (sb,)
    if EARLY:
        tl.extra.cuda.gdc_wait()  # the kernel before this one (it wrote x) has finished
    offs_m = tl.arange(0, BLOCK_M)
    x_rows = x_ptr + tl.minimum(offs_m, M - 1)[:, None] * stride_xm
    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N, GROUPS), dtype=tl.float32)
    for i in tl.static_range(STEPS):
        x = _load_x(x_rows, i * BLOCK_K, K, BLOCK_K, True)
        acc = accumulate(acc, x, words[i], sbits[i], USE_DOT, IEEE)
    if not USE_DOT:
        acc = tl.sum(acc, axis=2)
    acc = acc * tl.load(rs_ptr + rows_n)[None, :]
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + rows_n).to(tl.float32)[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)


def steps_for(k: int, config: EarlyConfig) -> int:
    """How many ``block_k`` steps make K; a ``ValueError`` naming the fix where none do."""
    steps = k // config.block_k
    if (config.block_k < 32 or config.block_k & (config.block_k - 1) or steps * config.block_k != k
            or not 1 <= steps <= MAX_STEPS):
        raise ValueError(
            f"EarlyConfig.block_k = {config.block_k} does not split K = {k} into 1..{MAX_STEPS} "
            f"equal power-of-two steps; pick a block_k that is a power of two dividing K")
    return steps


def nvfp4_gemv_early(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                     row_scale: torch.Tensor, bias: torch.Tensor | None, *,
                     config: EarlyConfig | None = None,
                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x (M <= 16, K), packed (N, K/2) uint8, scales (N, K/16) fp8, row_scale (N,) float32 ->
    (M, N) in ``out_dtype`` (x's by default), launched early (PDL) unless ``config.early`` is off."""
    cfg = config or EarlyConfig()
    if not supports(x, packed):
        raise ValueError(
            f"nvfp4_gemv_early takes what triton_gemv.supports does (x of 1..{MAX_ROWS} rows); got x "
            f"{tuple(x.shape)} {x.dtype}, packed {tuple(packed.shape)} {packed.dtype}")
    m, k = x.shape
    n = packed.shape[0]
    steps = steps_for(k, cfg)
    words = packed.view(torch.int32)
    sbits = scales.view(torch.uint8)
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    extra = {"launch_pdl": True} if cfg.early else {}
    _early_gemv_kernel[(triton.cdiv(n, cfg.block_n),)](
        x, words, sbits, row_scale, bias if bias is not None else row_scale, out,
        m, n, k, x.stride(0), words.stride(0), sbits.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32, USE_DOT=cfg.dot,
        BLOCK_M=16 if cfg.dot else max(1, triton.next_power_of_2(m)), BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, STEPS=steps, EARLY=cfg.early, num_warps=cfg.num_warps, **extra)
    return out
