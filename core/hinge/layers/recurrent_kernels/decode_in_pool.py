"""Decode on CUDA: the gated delta rule for one token per request, reading and writing the state
pool in place (one Triton kernel, no gather and no scatter of the states).

A decode step's matrix states are the bulk of its recurrent bytes (Qwen3.5-9B: 32 value heads of
128 x 128 float32 = 2 MiB per request per layer). Gathering them into a batch, running a kernel
and scattering the result back moves each state three times (read + write each: 6 passes); the
zero-fill of fresh rows a captured graph keeps adds two more. Here every program loads its slice
of request ``i``'s state straight from ``pool[read_slots[i]]`` (zeros when ``prefix_lens[i] == 0``:
a fresh request, or a padded graph row) and stores the new slice straight into
``pool[write_slots[i]]``: 2 passes, the minimum.

The token loop is the deterministic kernel's (``delta_rule_triton``: one program per (request,
value head, ``BV`` value columns) in ``program_tile``'s order, ``walk_tokens`` inlined). With that
kernel's tiling (``BV`` columns, one warp: the default, deterministic mode's) the outputs and
states are batch invariant and the same bits as its decode rows. Default mode takes
``DEFAULT_MODE_TILE`` instead (32 columns a program, one warp): on the H200 22.0 / 74.8 us a layer
at batch 16 / 64 against 28.6 / 103.4 (73 / 86% of the copy bandwidth against 56 / 62%,
``tools/gpu/recurrent_decode.py --sweep``, 2026-12-02); other bits (the Dk reductions' trees
follow the layout), one tiling at every batch size (one compiled variant), batch invariant still.

Safe in place: a program reads and writes only its own (slot, head, columns) tile, and no two live
requests of a step share a slot (each reads its own slot or its own checkpoint and writes its own
slot or a fresh checkpoint slot); padded graph rows all use the reserved slot 0, whose contents
nobody reads.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.layers.recurrent_kernels.delta_rule_triton import (
    BV,
    EPS,
    MAX_UNIFORM_ROWS,
    UNALIGNED_TOKEN_INPUTS,
    _arange,
    num_programs,
    program_tile,
    state_tile,
    walk_tokens,
)


# NOTE: the token loop's alignment list (H200, 2026-12-02: with the inputs' alignment specialized
# on here and not in the token-recurrence kernel, deterministic decode rows lost its bits)
@triton.jit(do_not_specialize_on_alignment=UNALIGNED_TOKEN_INPUTS)
def _decode_in_pool_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, pool_ptr, cu_ptr, read_ptr, write_ptr, prefix_ptr, out_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_gt, stride_bt,
    scale, eps,
    HV: tl.constexpr, REP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
):
    i_n, i_h, i_v = program_tile(HV, DV, BV)
    i_hk = i_h // REP
    # NOTE: row i_n from cu = 0, 1, 2, ... loaded, as the token-recurrence kernel does: the same
    # token loop (a trip count known at compile time would let it lay the loop out otherwise)
    bos, eos, offs_k, offs_v, mask_k, mask_v, mask_s, s_off = state_tile(cu_ptr, i_n, i_v, DK, DV,
                                                                          BK, BV)
    src = tl.load(read_ptr + i_n).to(tl.int64)
    resumes = tl.load(prefix_ptr + i_n) != 0  # a fresh request starts from zeros
    S = tl.load(pool_ptr + (src * HV + i_h) * DK * DV + s_off, mask=mask_s & resumes,
                other=0.0).to(tl.float32)
    S = walk_tokens(S, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, out_ptr, out_ptr, bos, eos, i_h, i_hk,
                    offs_k, offs_v, mask_k, mask_v, mask_s, s_off, stride_qt, stride_qh, stride_kt,
                    stride_kh, stride_vt, stride_vh, stride_gt, stride_bt, scale, eps, HV, DK, DV,
                    False)
    dst = tl.load(write_ptr + i_n).to(tl.int64)
    tl.store(pool_ptr + (dst * HV + i_h) * DK * DV + s_off, S.to(pool_ptr.dtype.element_ty),
             mask=mask_s)


#: default mode's tiling (value columns a program, warps): module docstring
DEFAULT_MODE_TILE = (32, 1)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def decode_in_pool(q, k, v, g, beta, pool, read_slots, write_slots, prefix_lens, *,
                   tile: tuple[int, int] | None = None):
    """The contract of ``RecurrentKernels.decode_in_pool``.

    ``tile`` (value columns a program, warps): another tiling than the deterministic kernel's
    (``BV``, 1 warp); its bits may differ from that kernel's (the Dk reductions' trees follow the
    layout): default mode passes ``DEFAULT_MODE_TILE``, ``tools/gpu/recurrent_decode.py --sweep``
    others; deterministic mode none.

    :param q: (B, Hk, Dk). :param k: (B, Hk, Dk). :param v: (B, Hv, Dv): one token per request.
    :param g: (B, Hv) log decay. :param beta: (B, Hv).
    :param pool: (slots, Hv, Dk, Dv) contiguous, any float dtype; updated in place.
    :param read_slots: (B,) int. :param write_slots: (B,) int. :param prefix_lens: (B,) int.
    :returns: out (B, Hv, Dv) in q's dtype.
    """
    b, hk, dk = q.shape
    hv, dv = v.shape[1:]
    if not pool.is_contiguous() or tuple(pool.shape[1:]) != (hv, dk, dv):
        raise ValueError(f"decode_in_pool needs a contiguous (slots, {hv}, {dk}, {dv}) state pool, "
                         f"got {tuple(pool.shape)} (contiguous={pool.is_contiguous()})")
    q, k, v, g, beta = (_rows(x) for x in (q, k, v, g, beta))
    out = torch.empty(b, hv, dv, dtype=q.dtype, device=q.device)
    if b == 0:
        return out
    if b > MAX_UNIFORM_ROWS:
        raise ValueError(f"decode_in_pool takes at most {MAX_UNIFORM_ROWS} requests a call, got {b}")
    bv, warps = tile or (BV, 1)
    _decode_in_pool_kernel[num_programs(b, hv, dv, bv)](
        q, k, v, g, beta, pool, _arange(q.device)[: b + 1], read_slots, write_slots,
        prefix_lens, out,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        g.stride(0), beta.stride(0), dk ** -0.5, EPS,
        HV=hv, REP=hv // hk, DK=dk, DV=dv, BK=triton.next_power_of_2(dk), BV=bv, num_warps=warps,
    )
    return out
