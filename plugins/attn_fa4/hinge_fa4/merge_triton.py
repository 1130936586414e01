"""The split decode's merge as one Triton kernel (``hinge_fa4.combine`` states the sums and the
order): one program per (query row, head) reads its row's used parts only, ``BLOCK_S`` (16) at a
time: one load of 16 lses and of 16 head rows of outputs per block instead of one dependent load
per part (the per-part loops took 3.6 us at batch 1 on the H200, a fifth of a split layer), the
first block's outputs loaded with its lses (one wait for a row of at most 16 parts: 4097 keys
in 512-key chunks are 9, in 256-key chunks 17 with the short tail, 16 with the long). The
max lse over the blocks, then each block's ``exp(lse_s - max) o_s`` and weights summed (a fixed
tree of 16) and added block after block in slot order; divide; write the row in the output
dtype. Batch invariant: ``BLOCK_S`` is a constant, so nothing a program does depends on other
rows or on the slot count. Imported on CUDA only (the CPU path is torch; tests interpret it).
With ``hinge.devices.early_dependents`` launched early (it waits for the attention call before
reading the parts; the row's part count, metadata written before that call started, is read
before the wait) and letting the o projection launch early.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.devices import early_dependents

BLOCK_S = 16  #: parts per load: a constant (a row's bits must not depend on the step's slot count)


@triton.jit
def _merge_kernel(out_ptr, lse_ptr, parts_ptr, dst_ptr, num_slots, heads,
                  so_v, so_h, sl_v, sl_h, sd_t, sd_h,
                  D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, ACC: tl.constexpr,
                  EARLY: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    # NOTE: the row's part count is the step's metadata, written before the attention call
    # started (a graph's static buffers are filled before replay), so it is read before the wait:
    # after it only the parts' own loads stand between the attention call's end and the store
    n = tl.load(parts_ptr + t)
    if EARLY:  # hinge.devices.early_dependents: the o projection may launch (and start on its
        tl.extra.cuda.gdc_launch_dependents()  # weights) now; this kernel, launched early
        tl.extra.cuda.gdc_wait()  # itself, waits for the attention call here
    d = tl.arange(0, BLOCK_D)
    mask_d = d < D
    slots = t * num_slots + tl.arange(0, BLOCK_S)
    # NOTE: the first block's lses and outputs are loaded together, up front: a row of at most
    # BLOCK_S parts (4k keys in 512-key chunks, or 256 with the long tail) waits for memory once
    used = tl.arange(0, BLOCK_S) < n
    lse0 = tl.load(lse_ptr + slots * sl_v + h * sl_h, mask=used, other=float("-inf")).to(ACC)
    o0 = tl.load(out_ptr + slots[:, None] * so_v + h * so_h + d[None, :],
                 mask=used[:, None] & mask_d[None, :], other=0.0).to(ACC)
    top = tl.max(lse0, axis=0)
    for s0 in range(BLOCK_S, n, BLOCK_S):
        used = tl.arange(0, BLOCK_S) < n - s0
        lse = tl.load(lse_ptr + (slots + s0) * sl_v + h * sl_h, mask=used, other=float("-inf"))
        top = tl.maximum(top, tl.max(lse.to(ACC), axis=0))
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp(lse0 - top)  # 0 for a slot past the row's parts
    acc = tl.zeros([BLOCK_D], ACC) + tl.sum(tl.where(w[:, None] > 0, w[:, None] * o0, 0.0), axis=0)
    total = tl.full([], 0.0, ACC) + tl.sum(w, axis=0)
    for s0 in range(BLOCK_S, n, BLOCK_S):
        used = tl.arange(0, BLOCK_S) < n - s0
        lse = tl.load(lse_ptr + (slots + s0) * sl_v + h * sl_h, mask=used, other=float("-inf"))
        w = tl.exp(lse.to(ACC) - top)
        o = tl.load(out_ptr + (slots + s0)[:, None] * so_v + h * so_h + d[None, :],
                    mask=used[:, None] & mask_d[None, :], other=0.0).to(ACC)
        acc += tl.sum(tl.where(w[:, None] > 0, w[:, None] * o, 0.0), axis=0)
        total += tl.sum(w, axis=0)
    acc = acc / tl.where(total > 0, total, 1.0)
    tl.store(dst_ptr + t * sd_t + h * sd_h + d, acc.to(dst_ptr.dtype.element_ty), mask=mask_d)


def merge_parts_triton(out_parts: torch.Tensor, lse_parts: torch.Tensor, num_parts: torch.Tensor,
                       num_slots: int, out_dtype: torch.dtype) -> torch.Tensor:
    """``hinge_fa4.combine.merge_parts`` in one launch: (T, H, D) in ``out_dtype``."""
    v, heads, dim = out_parts.shape
    assert out_parts.stride(2) == 1, "each part's head rows must be contiguous"
    assert lse_parts.shape == (v, heads), f"lse {tuple(lse_parts.shape)} != ({v}, {heads})"
    rows = v // num_slots
    dst = torch.empty(rows, heads, dim, dtype=out_dtype, device=out_parts.device)
    acc = tl.float64 if lse_parts.dtype == torch.float64 else tl.float32
    early = early_dependents(out_parts.device)
    _merge_kernel[(rows, heads)](
        out_parts, lse_parts, num_parts, dst, num_slots, heads,
        out_parts.stride(0), out_parts.stride(1), lse_parts.stride(0), lse_parts.stride(1),
        dst.stride(0), dst.stride(1), D=dim, BLOCK_D=triton.next_power_of_2(dim), BLOCK_S=BLOCK_S,
        ACC=acc, EARLY=early, launch_pdl=early, num_warps=1)
    return dst
