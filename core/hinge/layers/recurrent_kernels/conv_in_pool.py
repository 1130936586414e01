"""Decode on CUDA: the depthwise causal conv for one token per request, reading and writing its
window in the state pool (one Triton kernel: no gather, no concatenation, no scatter).

The torch reference of a decode step gathers each request's window (``StatePool.read``), casts
and concatenates it with the new inputs, runs ``K`` multiply-adds as separate tensors, the
activation and a cast, slices out the final window, makes it contiguous and scatters it back:
about fifteen kernels per layer whatever the batch (Qwen3.5: 24 DeltaNet layers of them per
token). Here program ``(i, c)`` of request ``i`` and a block of channels loads
``pool[read_slots[i], c, :]`` (zeros when ``prefix_lens[i] == 0``: a fresh request, or a padded
graph row), computes

    out[i, c] = act(sum_j w[c, j] * xs[j] + bias[c]),  xs = [window[c, 0..K-2], x[i, c]]

in float32 with the reference's order (``w[:, 0] * xs[0]`` first, then each tap added), and
stores the shifted window ``xs[1..K-1]`` into ``pool[write_slots[i], c, :]`` in the pool's dtype.

Safe in place for the same reason as ``decode_in_pool``: a program reads and writes only its own
(slot, channels), and no two live requests of a step share a slot. With the activation in the
kernel (default mode) the SiLU's ``exp`` is Triton's, so the bits differ from the torch conv by
about an ulp; deterministic mode takes ``conv_in_pool_exact`` (the float32 sum from the kernel,
the activation from torch), whose bits are the torch conv's, as a decode row must be a prefill
row's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.layers.recurrent_kernels.torch_ref import check_conv_activation, conv_activation

BLOCK_C = 256


@triton.jit
def finish_conv(acc, b_ptr, offs_c, mask_c, HAS_BIAS: tl.constexpr, SILU: tl.constexpr):
    """The float32 tap sum ``acc`` plus the bias, then the activation (Triton's ``exp``): the one
    epilogue of the CUDA convs (this kernel and ``conv_prefill``'s), so default-mode prefill and
    decode rows share it."""
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + offs_c, mask=mask_c, other=0.0).to(tl.float32)
    if SILU:
        acc = acc * tl.sigmoid(acc)
    return acc


@triton.jit
def _conv_in_pool_kernel(x_ptr, w_ptr, b_ptr, pool_ptr, read_ptr, write_ptr, prefix_ptr, out_ptr,
                         C, stride_xt, stride_wc, stride_ps, stride_pc, stride_ot,
                         K: tl.constexpr, KP2: tl.constexpr, HAS_BIAS: tl.constexpr,
                         SILU: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask_c = offs_c < C
    offs_j = tl.arange(0, KP2)
    win_ok = mask_c[:, None] & (offs_j < K - 1)[None, :]
    src = tl.load(read_ptr + i).to(tl.int64)
    resumes = tl.load(prefix_ptr + i) != 0
    win = tl.load(pool_ptr + src * stride_ps + offs_c[:, None] * stride_pc + offs_j[None, :],
                  mask=win_ok & resumes, other=0.0)
    x = tl.load(x_ptr + i.to(tl.int64) * stride_xt + offs_c, mask=mask_c, other=0.0)
    xf = x.to(tl.float32)
    wf = tl.load(w_ptr + offs_c[:, None] * stride_wc + offs_j[None, :],
                 mask=mask_c[:, None] & (offs_j < K)[None, :], other=0.0).to(tl.float32)
    winf = win.to(x.dtype).to(tl.float32)  # the reference casts the window to the input dtype
    # taps in the reference's order: xs[0] * w[0], then + xs[j] * w[j]; xs[K-1] is the new input
    acc = tl.sum(tl.where(offs_j[None, :] == 0, winf * wf, 0.0), axis=1)
    for j in tl.static_range(1, K - 1):
        acc = acc + tl.sum(tl.where(offs_j[None, :] == j, winf * wf, 0.0), axis=1)
    w_last = tl.sum(tl.where(offs_j[None, :] == K - 1, wf, 0.0), axis=1)
    acc = finish_conv(acc + xf * w_last, b_ptr, offs_c, mask_c, HAS_BIAS, SILU)
    tl.store(out_ptr + i.to(tl.int64) * stride_ot + offs_c, acc.to(out_ptr.dtype.element_ty),
             mask=mask_c)
    # the window after the token: xs[1 .. K-1] (the old window shifted, the input last)
    shifted = tl.load(pool_ptr + src * stride_ps + offs_c[:, None] * stride_pc + offs_j[None, :] + 1,
                      mask=mask_c[:, None] & (offs_j < K - 2)[None, :] & resumes, other=0.0)
    new = tl.where((offs_j == K - 2)[None, :], xf[:, None], shifted.to(x.dtype).to(tl.float32))
    dst = tl.load(write_ptr + i).to(tl.int64)
    tl.store(pool_ptr + dst * stride_ps + offs_c[:, None] * stride_pc + offs_j[None, :],
             new.to(pool_ptr.dtype.element_ty), mask=win_ok)


def conv_in_pool(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 pool: torch.Tensor, read_slots: torch.Tensor, write_slots: torch.Tensor,
                 prefix_lens: torch.Tensor, *, activation: str | None = None,
                 out_dtype: torch.dtype | None = None, block_c: int = BLOCK_C,
                 num_warps: int = 4) -> torch.Tensor:
    """The contract of ``RecurrentKernels.conv_in_pool``.

    ``block_c`` channels a program on ``num_warps`` warps: a channel's arithmetic is its own, so
    any tiling gives the same bits (``tools/gpu/recurrent_decode.py --sweep`` times them).

    :param x: (B, C) one new input per request, unit last stride.
    :param weight: (C, K) taps, unit last stride. :param bias: (C,) or None.
    :param pool: (slots, C, K-1) the layer's windows (``StatePool.conv[state_id]``), unit last
        stride; updated in place.
    :param out_dtype: the output's dtype (default x's); float32 keeps the sum unrounded.
    :returns: out (B, C).
    """
    b, c = x.shape
    k = weight.shape[1]
    check_conv_activation(activation)
    if tuple(pool.shape[1:]) != (c, k - 1) or pool.stride(-1) != 1 or x.stride(-1) != 1 \
            or weight.stride(-1) != 1 or k < 2:
        raise ValueError(f"conv_in_pool needs x (B, C) and weight (C, K >= 2) with unit last strides "
                         f"and a pool (slots, C, K-1); got x {tuple(x.shape)}, weight "
                         f"{tuple(weight.shape)}, pool {tuple(pool.shape)}")
    out = torch.empty(b, c, dtype=out_dtype or x.dtype, device=x.device)
    if b == 0:
        return out
    _conv_in_pool_kernel[(b, triton.cdiv(c, block_c))](
        x, weight, bias if bias is not None else weight, pool, read_slots, write_slots, prefix_lens,
        out, c, x.stride(0), weight.stride(0), pool.stride(0), pool.stride(1), out.stride(0),
        K=k, KP2=triton.next_power_of_2(k), HAS_BIAS=bias is not None, SILU=activation == "silu",
        BLOCK=block_c, num_warps=num_warps, enable_fp_fusion=False)  # the reference's mul, add
    return out


def conv_in_pool_exact(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       pool: torch.Tensor, read_slots: torch.Tensor, write_slots: torch.Tensor,
                       prefix_lens: torch.Tensor, *, activation: str | None = None) -> torch.Tensor:
    """``conv_in_pool`` with the torch reference's bits, for deterministic mode: the kernel sums
    the taps in the reference's order without fused multiply-adds and returns the float32 sum;
    the activation and the cast to x's dtype are then the reference's own
    (``torch_ref.conv_activation``, which ``_conv_windows`` applies). A decode row so equals the prefill row of its position, which
    the torch conv computes. Three kernels where the gathered reference path runs about fifteen."""
    check_conv_activation(activation)  # before the kernel writes the pool
    out = conv_in_pool(x, weight, bias, pool, read_slots, write_slots, prefix_lens,
                       out_dtype=torch.float32)
    return conv_activation(out, activation, deterministic=True).to(x.dtype)
