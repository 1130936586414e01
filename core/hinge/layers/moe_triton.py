"""The grouped GEMM of the MoE experts on CUDA, in Triton (imported only for CUDA tensors).

No host sync anywhere (capturable in a CUDA graph): the (token, slot) pairs are grouped by
expert on the device and every expert's group is padded to a multiple of ``BLOCK_M``
(``hinge.layers.moe_align``); the launch grid covers the worst case and blocks past the padded
total return at once.

A block multiplies its rows of A (row ``p // a_div`` of the activations) by its expert's
weight (N, K) and writes rows ``p`` of C, accumulating in float32 over K in a fixed order. A
row's result does not depend on which other rows share its block, so with one fixed tile
configuration (``deterministic``) the kernel is batch invariant.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinge.layers.moe_align import align_pairs


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


SMALL = TileConfig(16, 64, 64)  #: decode: few pairs per expert, little padding
LARGE = TileConfig(64, 128, 64, num_warps=8)  #: prefill
DETERMINISTIC = TileConfig(16, 64, 64)  #: one configuration whatever the batch


def pick_config(num_pairs: int, num_experts: int, deterministic: bool) -> TileConfig:
    if deterministic:
        return DETERMINISTIC
    return SMALL if num_pairs <= 4 * num_experts else LARGE


@triton.jit
def _grouped_gemm_kernel(
    a_ptr, b_ptr, c_ptr, sorted_pairs_ptr, block_expert_ptr, padded_total_ptr,
    num_pairs, N, K,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    A_DIV: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // num_n, pid % num_n
    if pid_m * BLOCK_M >= tl.load(padded_total_ptr):
        return
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pairs_ptr + rows).to(tl.int64)
    valid = pairs < num_pairs
    a_rows = pairs // A_DIV
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + pairs[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (offs_n[None, :] < N))


def grouped_gemm(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, aligned, *, a_div: int,
                 num_pairs: int, config: TileConfig) -> torch.Tensor:
    """``out[p] = a[p // a_div] @ w[expert of p].T`` for every pair ``p``; w is (E, N, K)."""
    sorted_pairs, block_expert, padded_total = aligned
    n, k = w.shape[1], w.shape[2]
    grid = (block_expert.numel() * triton.cdiv(n, config.block_n),)
    _grouped_gemm_kernel[grid](
        a, w, out, sorted_pairs, block_expert, padded_total,
        num_pairs, n, k,
        a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0), out.stride(1),
        A_DIV=a_div, IEEE=a.dtype == torch.float32,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


def grouped_experts_triton(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                           act, *, deterministic: bool = False) -> torch.Tensor:
    """Each expert's MLP on its (token, slot) pairs: (T * k, H) in pair order ``t * k + j``."""
    t, k = topk_ids.shape
    num_experts, two_i, hidden = w13.shape
    num_pairs = t * k
    config = pick_config(num_pairs, num_experts, deterministic)
    aligned = align_pairs(topk_ids, num_experts, config.block_m)
    gate_up = torch.empty(num_pairs, two_i, dtype=x.dtype, device=x.device)
    grouped_gemm(x, w13, gate_up, aligned, a_div=k, num_pairs=num_pairs, config=config)
    width = two_i // 2
    inner = act(gate_up[:, :width]) * gate_up[:, width:]
    out = torch.empty(num_pairs, hidden, dtype=x.dtype, device=x.device)
    return grouped_gemm(inner, w2, out, aligned, a_div=1, num_pairs=num_pairs, config=config)
