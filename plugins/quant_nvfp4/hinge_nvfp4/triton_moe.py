"""NVFP4 experts on CUDA: a grouped Triton GEMM over the routed (token, slot) pairs.

    pairs grouped by expert on the device, each group padded to BLOCK_M rows
    (``hinge.layers.moe_align.align_pairs``: no host sync) -> per block: its expert's packed
    codes and fp8 scales decoded in registers (as ``triton_gemm``), float32 sums, the expert's
    per-row global scale in the epilogue -> gate_up (pairs, 2I) -> act(gate) * up -> the same
    kernel with w2 -> weighted sum over each token's slots in column order

One tile configuration in deterministic mode (a pair's result does not depend on the other
pairs of its block), a second one for large batches otherwise.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinge.layers.activation import get_activation
from hinge.layers.fused_moe import weighted_sum
from hinge.layers.moe_align import align_pairs
from hinge_nvfp4.reference import quantize_activation
from hinge_nvfp4.triton_gemm import _decode_e2m1, _decode_e4m3

SMALL = (16, 64, 128)  #: block_m, block_n, block_k: decode, and every batch when deterministic
LARGE = (64, 128, 64)


@triton.jit
def _grouped_w4a16_kernel(
    a_ptr, w_ptr, s_ptr, rs_ptr, c_ptr, sorted_pairs_ptr, block_expert_ptr, padded_total_ptr,
    num_pairs, N, K,
    stride_am, stride_ak, stride_we, stride_wn, stride_wk, stride_se, stride_sn, stride_sk,
    stride_re, stride_cm,
    A_DIV: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // num_n, pid % num_n
    if pid_m * BLOCK_M >= tl.load(padded_total_ptr):
        return
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    pairs = tl.load(sorted_pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    valid = pairs < num_pairs
    a_rows = pairs // A_DIV
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    offs_b = tl.arange(0, BLOCK_K // 2)
    offs_s = tl.arange(0, BLOCK_K // 16)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + a_rows[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
                    mask=valid[:, None] & ((k0 + offs_k)[None, :] < K), other=0.0)
        packed = tl.load(w_ptr + expert * stride_we + offs_n[:, None] * stride_wn
                         + (k0 // 2 + offs_b)[None, :] * stride_wk,
                         mask=mask_n[:, None] & ((k0 // 2 + offs_b)[None, :] < K // 2), other=0)
        codes = tl.reshape(tl.join(packed & 15, packed >> 4), (BLOCK_N, BLOCK_K))
        sbits = tl.load(s_ptr + expert * stride_se + offs_n[:, None] * stride_sn
                        + (k0 // 16 + offs_s)[None, :] * stride_sk,
                        mask=mask_n[:, None] & ((k0 // 16 + offs_s)[None, :] < K // 16), other=0)
        scale = tl.reshape(tl.broadcast_to(_decode_e4m3(sbits)[:, :, None], (BLOCK_N, BLOCK_K // 16, 16)),
                           (BLOCK_N, BLOCK_K))
        w = (_decode_e2m1(codes) * scale).to(a.dtype)
        if IEEE:
            acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, tl.trans(w), acc)
    acc = acc * tl.load(rs_ptr + expert * stride_re + offs_n, mask=mask_n, other=0.0)[None, :]
    tl.store(c_ptr + pairs[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=valid[:, None] & mask_n[None, :])


def grouped_gemm(a: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, row_scale: torch.Tensor,
                 out: torch.Tensor, aligned, *, a_div: int, num_pairs: int, tile: tuple[int, int, int]) -> torch.Tensor:
    """``out[p] = (a[p // a_div] @ W'_e^T) * row_scale[e]`` for every pair ``p`` of expert ``e``."""
    sorted_pairs, block_expert, padded_total = aligned
    block_m, block_n, block_k = tile
    n, k = packed.shape[1], packed.shape[2] * 2
    sbits = scales.view(torch.uint8)
    grid = (block_expert.numel() * triton.cdiv(n, block_n),)
    _grouped_w4a16_kernel[grid](
        a, packed, sbits, row_scale, out, sorted_pairs, block_expert, padded_total,
        num_pairs, n, k,
        a.stride(0), a.stride(1), packed.stride(0), packed.stride(1), packed.stride(2),
        sbits.stride(0), sbits.stride(1), sbits.stride(2), row_scale.stride(0), out.stride(0),
        A_DIV=a_div, IEEE=a.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return out


def nvfp4_experts(x: torch.Tensor, w13: tuple, w2: tuple, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  *, activation: str = "silu", deterministic: bool = False) -> torch.Tensor:
    """``w13`` / ``w2`` = (packed (E, N, K/2), fp8 scales, row scales (E, N), activation scale
    or None (W4A16)). x (T, H) -> (T, H)."""
    t, k = topk_ids.shape
    if t == 0:
        return x.new_zeros(x.shape)
    num_experts, two_i = w13[0].shape[0], w13[0].shape[1]
    num_pairs = t * k
    tile = SMALL if deterministic or num_pairs <= 4 * num_experts else LARGE
    aligned = align_pairs(topk_ids, num_experts, tile[0])
    a, s13 = x, w13[2]
    if w13[3] is not None:  # W4A4 emulation: activations as Blackwell sees them, exact in bf16
        a, s13 = quantize_activation(x, w13[3]).to(x.dtype), w13[2] * w13[3]
    gate_up = torch.empty(num_pairs, two_i, dtype=x.dtype, device=x.device)
    grouped_gemm(a, w13[0], w13[1], s13, gate_up, aligned, a_div=k, num_pairs=num_pairs, tile=tile)
    act = get_activation(activation)
    inner = act(gate_up[:, : two_i // 2]) * gate_up[:, two_i // 2:]
    s2 = w2[2]
    if w2[3] is not None:
        inner, s2 = quantize_activation(inner, w2[3]).to(x.dtype), w2[2] * w2[3]
    out = torch.empty(num_pairs, x.shape[1], dtype=x.dtype, device=x.device)
    grouped_gemm(inner, w2[0], w2[1], s2, out, aligned, a_div=1, num_pairs=num_pairs, tile=tile)
    return weighted_sum(out, topk_weights)
