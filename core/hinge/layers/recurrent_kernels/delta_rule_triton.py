"""Batch-invariant gated delta rule on CUDA: the exact token recurrence in one Triton kernel.

One program per (request, value head, block of ``BV`` value columns) keeps its (Dk, BV) slice of
the state in registers (float32) and walks the request's tokens in order::

    q, k = l2norm(q) * Dk^-0.5, l2norm(k)        (float32, eps 1e-6)
    S = exp(g) * S;  delta = beta * (v - k^T S);  S = S + k delta^T;  o = q^T S

Every token is this same arithmetic on the state the previous token left, whatever else runs:
a column of the state never meets another column, a request never meets another request, and
the tiling (``BK`` = Dk rounded up to a power of two, ``BV`` columns, one warp) depends only on
the head sizes. So the state after token ``t`` and its output are the same bits alone or in any
batch, in a prefill of any length, split at any position (chunked prefill, a prefix-cache
resume) or one token per step (decode): a prefill row equals the decode row of its position.

NOTE: why not chunks at absolute positions. A chunked (WY) form sums the same terms in another
association, so a chunk run whole, the same chunk split over two steps, and its tokens decoded
one by one differ in the last bits. The pool keeps one state per request and any position can
end a step (every decode token does), so the state after each token has to be one function of
the state before it: the token recurrence. The kernel is sequential over a request's tokens
and parallel over requests, heads and value columns.
"""

from __future__ import annotations

import functools
from itertools import pairwise

import torch
import triton
import triton.language as tl

from hinge.devices import to_device

BV = 8  #: value columns per program (fla's fused recurrent kernel uses the same)
EPS = 1e-6  #: the L2-norm epsilon of the torch reference (``torch_ref.l2norm``)


@triton.jit
def token_step(S, q, k, v, g, beta, scale, eps):
    """One token of the recurrence on a (BK, BV) float32 slice of the state. Returns the new
    slice and the token's (BV,) output."""
    qn = q * tl.rsqrt(tl.sum(q * q, axis=0) + eps) * scale
    kn = k * tl.rsqrt(tl.sum(k * k, axis=0) + eps)
    S = S * tl.exp(g)
    kv = tl.sum(S * kn[:, None], axis=0)
    delta = (v - kv) * beta
    S = S + kn[:, None] * delta[None, :]
    o = tl.sum(S * qn[:, None], axis=0)
    return S, o


@triton.jit
def program_tile(HV: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr):
    """(request, value head, value block) of this program in a 1-D grid of ``B * HV * NV``
    programs (``NV = ceil(DV / BV)``), value blocks fastest. The hardware starts blocks in grid
    order, so the ``NV`` programs that share one head's contiguous (Dk, Dv) state run side by
    side and each state row is fetched once; with the request fastest (a (B, HV, NV) grid) the
    slices of one row were ``B * HV`` programs apart, and decode at batch 64 moved its states at
    29% of the copy bandwidth on the H200 (65% with this order; docs/benchmarks.md). Which
    program owns which tile changes no order of summation, so the bits do not depend on it."""
    NV: tl.constexpr = (DV + BV - 1) // BV
    pid = tl.program_id(0)
    i_v = pid % NV
    i_h = (pid // NV) % HV
    i_n = pid // (NV * HV)
    return i_n, i_h, i_v


def num_programs(b: int, hv: int, dv: int, bv: int = BV) -> tuple[int]:
    """The 1-D grid ``program_tile`` reads (``bv`` value columns a program)."""
    return (b * hv * triton.cdiv(dv, bv),)


@triton.jit
def state_tile(cu_ptr, i_n, i_v, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
               BV: tl.constexpr):
    """Row ``i_n``'s token range and the (BK, BV) tile of its state that program ``i_v`` owns:
    (bos, eos, offs_k, offs_v, mask_k, mask_v, mask_s, s_off). Shared by both kernels."""
    bos = tl.load(cu_ptr + i_n).to(tl.int64)
    eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k = offs_k < DK
    mask_v = offs_v < DV
    mask_s = mask_k[:, None] & mask_v[None, :]
    s_off = offs_k[:, None] * DV + offs_v[None, :]
    return bos, eos, offs_k, offs_v, mask_k, mask_v, mask_s, s_off


@triton.jit
def walk_tokens(S, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, out_ptr, states_ptr, bos, eos, i_h, i_hk,
                offs_k, offs_v, mask_k, mask_v, mask_s, s_off, stride_qt, stride_qh, stride_kt,
                stride_kh, stride_vt, stride_vh, stride_gt, stride_bt, scale, eps,
                HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, TRACK: tl.constexpr):
    """Rows ``bos..eos-1`` of one request through the recurrence from its (BK, BV) float32 slice
    ``S`` of the state: outputs (and with ``TRACK`` the state after each row) stored, the final
    slice returned. The one place the token loop is written: ``_delta_rule_kernel`` and
    ``decode_in_pool`` both inline it (the same code, so a decode row is the same bits whichever
    kernel runs it)."""
    q_row = q_ptr + i_hk * stride_qh + offs_k
    k_row = k_ptr + i_hk * stride_kh + offs_k
    v_row = v_ptr + i_h * stride_vh + offs_v
    # NOTE: the next token's inputs are loaded before this token's arithmetic (loads overlap the
    # sequential chain); the arithmetic itself is the same whatever was prefetched
    ok = bos < eos
    q = tl.load(q_row + bos * stride_qt, mask=mask_k & ok, other=0.0).to(tl.float32)
    k = tl.load(k_row + bos * stride_kt, mask=mask_k & ok, other=0.0).to(tl.float32)
    v = tl.load(v_row + bos * stride_vt, mask=mask_v & ok, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + bos * stride_gt + i_h, mask=ok, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + bos * stride_bt + i_h, mask=ok, other=0.0).to(tl.float32)
    for t in range(bos, eos):
        nxt = t + 1
        ok = nxt < eos
        q_next = tl.load(q_row + nxt * stride_qt, mask=mask_k & ok, other=0.0).to(tl.float32)
        k_next = tl.load(k_row + nxt * stride_kt, mask=mask_k & ok, other=0.0).to(tl.float32)
        v_next = tl.load(v_row + nxt * stride_vt, mask=mask_v & ok, other=0.0).to(tl.float32)
        g_next = tl.load(g_ptr + nxt * stride_gt + i_h, mask=ok, other=0.0).to(tl.float32)
        beta_next = tl.load(beta_ptr + nxt * stride_bt + i_h, mask=ok, other=0.0).to(tl.float32)
        S, o = token_step(S, q, k, v, g, beta, scale, eps)
        tl.store(out_ptr + (t * HV + i_h) * DV + offs_v, o.to(out_ptr.dtype.element_ty),
                 mask=mask_v)
        if TRACK:
            tl.store(states_ptr + (t * HV + i_h) * DK * DV + s_off, S, mask=mask_s)
        q, k, v, g, beta = q_next, k_next, v_next, g_next, beta_next
    return S


#: the token inputs whose alignment the token loop's kernels do not specialize on: a checkpoint-split
#: step (``run_split``) hands row slices that start anywhere, which would compile a variant after the
#: start-up warm-up. Every kernel that inlines ``walk_tokens`` takes this same list: the alignment
#: Triton assumes shapes its load layouts and so the reductions' order (decode rows and prefill
#: rows of one position must give the same bits)
UNALIGNED_TOKEN_INPUTS = ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr")


@triton.jit(do_not_specialize_on_alignment=UNALIGNED_TOKEN_INPUTS)
def _delta_rule_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s0_ptr, cu_ptr, out_ptr, final_ptr, states_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_gt, stride_bt,
    scale, eps,
    HV: tl.constexpr, REP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, TRACK: tl.constexpr,
):
    i_n, i_h, i_v = program_tile(HV, DV, BV)
    i_hk = i_h // REP
    bos, eos, offs_k, offs_v, mask_k, mask_v, mask_s, s_off = state_tile(cu_ptr, i_n, i_v, DK, DV,
                                                                          BK, BV)
    head = (i_n * HV + i_h).to(tl.int64) * DK * DV
    S = tl.load(s0_ptr + head + s_off, mask=mask_s, other=0.0).to(tl.float32)
    S = walk_tokens(S, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, out_ptr, states_ptr, bos, eos, i_h, i_hk,
                    offs_k, offs_v, mask_k, mask_v, mask_s, s_off, stride_qt, stride_qh, stride_kt,
                    stride_kh, stride_vt, stride_vh, stride_gt, stride_bt, scale, eps, HV, DK, DV, TRACK)
    tl.store(final_ptr + head + s_off, S, mask=mask_s)


MAX_UNIFORM_ROWS = 1 << 16


@functools.cache
def _arange(device: torch.device) -> torch.Tensor:
    """0, 1, 2, ... on the device, allocated once and never freed."""
    return torch.arange(MAX_UNIFORM_ROWS + 1, dtype=torch.int64, device=device)


@functools.lru_cache(maxsize=16)
def _layout_tensor(cu_seqlens: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return to_device(list(cu_seqlens), torch.int64, device)


def _cu_tensor(cu_seqlens: list[int], device: torch.device) -> torch.Tensor:
    """``cu_seqlens`` on the device. Requests of one length (decode, a verify step) read a slice
    of a tensor that is never freed (scaled on the device): a CUDA graph may hold its address and
    no host copy runs. Other layouts are copied once and shared by every recurrent layer."""
    b, first = len(cu_seqlens) - 1, cu_seqlens[1] - cu_seqlens[0]
    if b <= MAX_UNIFORM_ROWS and cu_seqlens[0] == 0 and all(
        e - s == first for s, e in pairwise(cu_seqlens)
    ):
        rows = _arange(torch.device(device))[: b + 1]
        return rows if first == 1 else rows * first
    return _layout_tensor(tuple(cu_seqlens), device)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def gated_delta_rule(q, k, v, g, beta, initial_state, cu_seqlens, track_states=False):
    """The contract of ``RecurrentKernels.gated_delta_rule``, batch invariant.

    :param q: (T, Hk, Dk). :param k: (T, Hk, Dk). :param v: (T, Hv, Dv).
    :param g: (T, Hv) log decay. :param beta: (T, Hv). :param initial_state: (B, Hv, Dk, Dv).
    :returns: ``(out (T, Hv, Dv) in q's dtype, final (B, Hv, Dk, Dv) float32, states or None)``
        where ``states`` (T, Hv, Dk, Dv) float32 is the state after each row (``track_states``).
    """
    t, hk, dk = q.shape
    hv, dv = v.shape[1:]
    b = len(cu_seqlens) - 1
    q, k, v, g, beta = (_rows(x) for x in (q, k, v, g, beta))
    out = torch.empty(t, hv, dv, dtype=q.dtype, device=q.device)
    final = torch.empty(b, hv, dk, dv, dtype=torch.float32, device=q.device)
    states = (torch.empty(t, hv, dk, dv, dtype=torch.float32, device=q.device)
              if track_states else None)
    if b == 0:
        return out, final, states
    _delta_rule_kernel[num_programs(b, hv, dv)](
        q, k, v, g, beta, initial_state.contiguous(), _cu_tensor(cu_seqlens, q.device),
        out, final, states if states is not None else final,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        g.stride(0), beta.stride(0), dk ** -0.5, EPS,
        HV=hv, REP=hv // hk, DK=dk, DV=dv, BK=triton.next_power_of_2(dk), BV=BV,
        TRACK=track_states, num_warps=1,
    )
    return out, final, states
