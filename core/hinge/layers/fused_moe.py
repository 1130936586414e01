"""Unquantized experts of a MoE block, all at once: the default of ``Quantizer.create_moe_weights``
/ ``apply_moe``.

    (token, slot) pairs -> sorted by expert -> grouped GEMM with w13 -> act(gate) * up
    -> grouped GEMM with w2 -> back to pair order -> weighted sum over each token's k slots

The grouped GEMM is one Triton kernel per projection on CUDA (``hinge.layers.moe_triton``,
expert offsets on the device: no host sync, CUDA-graph safe) and, on CPU, one matmul per
expert segment of the sorted tokens (the counts are read on the host: there is no device to
wait for). The slots of a token are summed in column order of ``topk_ids``, which the router
sorts by expert id, so a token's sum has a fixed order whatever else is in the batch; with
``deterministic`` the CPU matmuls are the 16-row-block ``batch_invariant`` kernels and the CUDA
kernel runs one fixed tile configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from hinge.layers import batch_invariant
from hinge.layers.activation import get_activation
from hinge.layers.weights import moe_parameter

if TYPE_CHECKING:
    from torch import nn

    from hinge.contracts import MoESpec


def create_unquantized_moe_weights(layer: nn.Module, spec: MoESpec) -> None:
    """``w13_weight`` (E, 2 I, H) (gate rows, then up rows) and ``w2_weight`` (E, H, I), this rank's I."""
    e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size_per_partition
    layer.w13_weight = moe_parameter(spec, (e, 2 * i, h), spec.dtype, output_dim=0, input_dim=1)
    layer.w2_weight = moe_parameter(spec, (e, h, i), spec.dtype, output_dim=0, input_dim=1)


def fused_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor, *, activation: str = "silu",
                  deterministic: bool = False) -> torch.Tensor:
    """``out[t] = sum_j topk_weights[t, j] * (act(x[t] W1_e^T) * (x[t] W3_e^T)) W2_e^T`` with
    ``e = topk_ids[t, j]``, summed in ``j`` order. x (T, H) -> (T, H) in x's dtype."""
    act = get_activation(activation)
    if x.shape[0] == 0:
        return x.new_zeros(x.shape)
    if x.is_cuda:
        from hinge.layers.moe_triton import grouped_experts_triton

        pairs = grouped_experts_triton(x, w13, w2, topk_ids, act, deterministic=deterministic)
    else:
        pairs = grouped_experts_cpu(x, w13, w2, topk_ids, act, deterministic=deterministic)
    return weighted_sum(pairs, topk_weights)


def weighted_sum(pairs: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """(T * k, H) expert outputs in pair order -> (T, H): slot by slot, in a fixed order."""
    t, k = topk_weights.shape
    weighted = pairs.view(t, k, -1) * topk_weights.to(pairs.dtype)[:, :, None]
    out = weighted[:, 0]
    for j in range(1, k):
        out = out + weighted[:, j]
    return out


def grouped_experts_cpu(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                        act, *, deterministic: bool = False) -> torch.Tensor:
    """Each expert's MLP on its (token, slot) pairs: (T * k, H) in pair order ``t * k + j``."""
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # pair ids grouped by expert, ascending
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()  # NOTE: host-visible on CPU only
    x_sorted = x.index_select(0, order // k)
    linear = batch_invariant.linear if deterministic else F.linear
    out_sorted = torch.empty(flat.shape[0], w2.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        segment = x_sorted[start : start + count]
        gate_up = linear(segment, w13[expert])
        if deterministic:
            hidden = batch_invariant.gated_activation(gate_up, act)
        else:
            width = gate_up.shape[-1] // 2
            hidden = act(gate_up[:, :width]) * gate_up[:, width:]
        out_sorted[start : start + count] = linear(hidden, w2[expert])
        start += count
    return torch.empty_like(out_sorted).index_copy_(0, order, out_sorted)
