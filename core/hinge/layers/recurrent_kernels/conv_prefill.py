"""Prefill on CUDA (default mode): the depthwise causal conv of a packed varlen batch in one Triton
kernel, instead of the torch reference's flat pass (a concatenation of windows and inputs, an
unfold, ``K`` multiply-adds as separate tensors, the activation, a cast, index gathers of the
outputs and the final windows: about a dozen kernels per DeltaNet layer of every prefill).

Program ``(r, c)`` of a row ``r < T`` (token ``t`` of request ``b`` at position ``p``) and a block
of channels computes

    out[t, c] = act(sum_j w[c, j] * xs[p - (K-1) + j] + bias[c])

over the request's positions, ``xs[q]`` being the input of position ``q >= 0`` or, for ``q < 0``,
the request's window ``window[b, c, K-1 + q]``, in float32 with the reference's order (the first
tap's product, then each tap added, no fused multiply-add) and the activation as
``conv_in_pool``'s (Triton's ``exp``, about an ulp from the torch SiLU, so default-mode prefill
and decode rows now share the formula). Programs ``T + b`` write request ``b``'s final window (the
inputs of its last ``K-1`` positions, reaching into the old window for requests shorter than
that). Track-state steps (per-position windows) keep the torch reference.

Deterministic mode takes ``conv_prefill_exact``: the same kernel's float32 tap sums (no activation
in the kernel), then the reference's own activation and cast, so its bits are the torch conv's
(as ``conv_in_pool_exact``'s decode rows are: a prefill row and a decode row of one position
agree) in one kernel where the reference's flat pass runs about a dozen.
"""

from __future__ import annotations

import functools
from itertools import pairwise

import torch
import triton
import triton.language as tl

from hinge.devices import to_device
from hinge.layers.recurrent_kernels.base import ConvResult
from hinge.layers.recurrent_kernels.conv_in_pool import finish_conv
from hinge.layers.recurrent_kernels.delta_rule_triton import _layout_tensor
from hinge.layers.recurrent_kernels.torch_ref import check_conv_activation, conv_activation

BLOCK_C = 256


@triton.jit
def _tap(x_ptr, win_ptr, start, b, q, offs_c, mask_c, stride_xt, stride_wb, stride_wc,
         K: tl.constexpr):
    """(BLOCK_C,) float32 input of request ``b``'s position ``q`` (its window when ``q < 0``),
    rounded to the input dtype first as the reference's concatenation is."""
    from_x = tl.load(x_ptr + (start + tl.maximum(q, 0)).to(tl.int64) * stride_xt + offs_c,
                     mask=mask_c & (q >= 0), other=0.0)
    from_win = tl.load(win_ptr + b.to(tl.int64) * stride_wb + offs_c * stride_wc + (K - 1 + q),
                       mask=mask_c & (q < 0), other=0.0).to(from_x.dtype)
    return tl.where(q >= 0, from_x, from_win).to(tl.float32)


# NOTE: nothing specializes: T (the step's rows) changes every step, and the windows' strides and
# alignment follow where they come from (the state pool, a prefix-cache checkpoint: a cache hit
# compiled a second variant after the warm-up on the H200), so one compiled kernel serves all
@triton.jit(do_not_specialize=("T", "C", "stride_xt", "stride_wc_taps", "stride_wb", "stride_wc",
                               "stride_ot", "stride_fb", "stride_fc"),
            do_not_specialize_on_alignment=("x_ptr", "w_ptr", "b_ptr", "win_ptr", "req_ptr",
                                            "cu_ptr", "out_ptr", "final_ptr"))
def _conv_prefill_kernel(x_ptr, w_ptr, b_ptr, win_ptr, req_ptr, cu_ptr, out_ptr, final_ptr,
                         T, C, stride_xt, stride_wc_taps, stride_wb, stride_wc, stride_ot,
                         stride_fb, stride_fc, K: tl.constexpr, HAS_BIAS: tl.constexpr,
                         SILU: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask_c = offs_c < C
    if r < T:  # one output row
        b = tl.load(req_ptr + r)
        start = tl.load(cu_ptr + b)
        p = r - start
        acc = _tap(x_ptr, win_ptr, start, b, p - (K - 1), offs_c, mask_c, stride_xt, stride_wb,
                   stride_wc, K) * tl.load(w_ptr + offs_c * stride_wc_taps, mask=mask_c,
                                           other=0.0).to(tl.float32)
        for j in tl.static_range(1, K):
            w_j = tl.load(w_ptr + offs_c * stride_wc_taps + j, mask=mask_c, other=0.0).to(tl.float32)
            acc = acc + _tap(x_ptr, win_ptr, start, b, p - (K - 1) + j, offs_c, mask_c, stride_xt,
                             stride_wb, stride_wc, K) * w_j
        acc = finish_conv(acc, b_ptr, offs_c, mask_c, HAS_BIAS, SILU)
        tl.store(out_ptr + r.to(tl.int64) * stride_ot + offs_c, acc.to(out_ptr.dtype.element_ty),
                 mask=mask_c)
    else:  # request b's final window: the inputs of its last K - 1 positions
        b = r - T
        start = tl.load(cu_ptr + b)
        length = tl.load(cu_ptr + b + 1) - start
        for i in tl.static_range(K - 1):
            v = _tap(x_ptr, win_ptr, start, b, length - (K - 1) + i, offs_c, mask_c, stride_xt,
                     stride_wb, stride_wc, K)
            tl.store(final_ptr + b.to(tl.int64) * stride_fb + offs_c * stride_fc + i,
                     v.to(final_ptr.dtype.element_ty), mask=mask_c)


@functools.lru_cache(maxsize=8)
def _row_requests(cu_seqlens: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """(T,) int32 request of each row, made once per step (every DeltaNet layer shares it; the
    offsets are ``delta_rule_triton._layout_tensor``'s, the copy fla's chunk kernel reads too)."""
    return to_device([i for i, (s, e) in enumerate(pairwise(cu_seqlens)) for _ in range(e - s)],
                     torch.int32, device)


def conv_prefill(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 initial_window: torch.Tensor, cu_seqlens: list[int], *,
                 activation: str | None = None, out_dtype: torch.dtype | None = None) -> ConvResult:
    """``RecurrentKernels.causal_conv1d`` without per-position windows: x (T, C) with a unit last
    stride, weight (C, K >= 2), bias (C,) or None, initial_window (B, C, K-1) (any float dtype;
    read in x's); returns out (T, C) in ``out_dtype`` (x's by default) and the final windows
    (B, C, K-1) in x's dtype."""
    t, c = x.shape
    k = weight.shape[1]
    b = len(cu_seqlens) - 1
    check_conv_activation(activation)
    if (x.stride(-1) != 1 or weight.stride(-1) != 1 or k < 2
            or tuple(initial_window.shape) != (b, c, k - 1) or cu_seqlens[-1] != t):
        raise ValueError(f"conv_prefill needs x (T, C) and weight (C, K >= 2) with unit last "
                         f"strides, windows (B, C, K-1) and cu_seqlens ending at T; got x "
                         f"{tuple(x.shape)}, weight {tuple(weight.shape)}, windows "
                         f"{tuple(initial_window.shape)}, cu_seqlens ending at {cu_seqlens[-1]}")
    if initial_window.stride(-1) != 1:
        initial_window = initial_window.contiguous()
    out = torch.empty(t, c, dtype=out_dtype or x.dtype, device=x.device)
    final = torch.empty(b, c, k - 1, dtype=x.dtype, device=x.device)
    if t == 0 or b == 0:
        return ConvResult(out, final)
    layout = tuple(cu_seqlens)
    req, cu = _row_requests(layout, x.device), _layout_tensor(layout, x.device)
    _conv_prefill_kernel[(t + b, triton.cdiv(c, BLOCK_C))](
        x, weight, bias if bias is not None else weight, initial_window, req, cu, out, final,
        t, c, x.stride(0), weight.stride(0), initial_window.stride(0), initial_window.stride(1),
        out.stride(0), final.stride(0), final.stride(1), K=k, HAS_BIAS=bias is not None,
        SILU=activation == "silu", BLOCK=BLOCK_C, num_warps=4, enable_fp_fusion=False)
    return ConvResult(out, final)


def conv_prefill_exact(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       initial_window: torch.Tensor, cu_seqlens: list[int], *,
                       activation: str | None = None) -> ConvResult:
    """``conv_prefill`` with the torch reference's bits, for deterministic mode: the kernel's
    float32 sums (taps in the reference's order, the bias, no fused multiply-add), then the
    reference's activation (``torch_ref.conv_activation``) and cast to x's dtype."""
    check_conv_activation(activation)
    r = conv_prefill(x, weight, bias, initial_window, cu_seqlens, out_dtype=torch.float32)
    return ConvResult(conv_activation(r.out, activation, deterministic=True).to(x.dtype),
                      r.final_window)
