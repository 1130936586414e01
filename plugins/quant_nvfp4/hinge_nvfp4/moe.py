"""NVFP4 experts: the CPU reference of the grouped path (the Triton kernel is
``hinge_nvfp4.triton_moe``).

    (token, slot) pairs -> sorted by expert -> per expert: gate_up = (x @ W13'^T) * s13[row]
    -> act(gate) * up -> (h @ W2'^T) * s2[expert] -> back to pair order -> weighted sum

``W'`` is ``e2m1 * block scale`` (exact in float32); sums in float32, the per-tensor scales
applied once after, rounded to the activation dtype as the GPU kernel rounds its outputs. A
token's slots are summed in column order (ascending expert id, as the router sorts them).
W4A4 emulation quantizes each expert input with the largest ``input_scale`` of its projection
over the experts, as a fused FP4 MoE kernel quantizes the hidden states once.
"""

from __future__ import annotations

import torch

from hinge.layers import batch_invariant
from hinge.layers.activation import get_activation
from hinge.layers.fused_moe import weighted_sum
from hinge_nvfp4.reference import dequantize_unscaled, matmul_f32, quantize_activation


def experts_cpu(x: torch.Tensor, w13: tuple, w2: tuple, topk_ids: torch.Tensor,
                topk_weights: torch.Tensor, *, activation: str = "silu", w4a4: bool = False,
                deterministic: bool = False) -> torch.Tensor:
    """``w13`` / ``w2`` = (packed (E, N, K/2), scales (E, N, K/16), row scales (E, N), input
    scale (0-d) or None). x (T, H) -> (T, H) in x's dtype."""
    if x.shape[0] == 0:
        return x.new_zeros(x.shape)
    act = get_activation(activation)
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w13[0].shape[0]).tolist()  # NOTE: host-visible on CPU only
    x_sorted = x.index_select(0, order // k)
    out_sorted = torch.empty(flat.shape[0], w2[0].shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        segment = x_sorted[start:start + count]
        gate_up = _project(segment, w13, expert, w4a4, deterministic)
        if deterministic:
            hidden = batch_invariant.gated_activation(gate_up, act)
        else:
            width = gate_up.shape[-1] // 2
            hidden = act(gate_up[:, :width]) * gate_up[:, width:]
        out_sorted[start:start + count] = _project(hidden, w2, expert, w4a4, deterministic)
        start += count
    pairs = torch.empty_like(out_sorted).index_copy_(0, order, out_sorted)
    return weighted_sum(pairs, topk_weights)


def _project(a: torch.Tensor, weights: tuple, expert: int, w4a4: bool, deterministic: bool) -> torch.Tensor:
    packed, scales, row_scale, input_scale = weights
    scale = row_scale[expert]
    if w4a4:
        a_in, scale = quantize_activation(a, input_scale), scale * input_scale
    else:
        a_in = a
    acc = matmul_f32(a_in, dequantize_unscaled(packed[expert], scales[expert]), deterministic)
    return (acc * scale).to(a.dtype)
