"""Independent float64 oracles: attention over the paged cache, one request at a time, a linear
layer, and routed MoE experts one token and one expert at a time. Slow and plain on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from hinge.contracts import AttentionLayer
    from hinge.forward import ForwardBatch, KVCache


def reference_attention(
    q: torch.Tensor,
    kv: KVCache,
    layer: AttentionLayer,
    batch: ForwardBatch,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
) -> torch.Tensor:
    """(T, H, D) float64: per request, causal (and sliding-window) softmax attention of its
    queries over its keys ``0..seq_len-1``, read through the page table; scaled scores pass
    through ``cap * tanh(s / cap)`` first when ``layer.logit_softcap`` is set.

    The new tokens' keys are read from ``kv`` at ``batch.out_loc``; pass ``k``/``v`` to take
    them from those tensors instead (before a backend wrote them).
    """
    ps = kv.page_size
    k_cache = kv.k[layer.kv_layer_id].double().cpu().clone()
    v_cache = kv.v[layer.kv_layer_id].double().cpu().clone()
    out_loc = batch.out_loc.cpu()
    if k is not None:
        k_cache[out_loc] = k.double().cpu()
    if v is not None:
        v_cache[out_loc] = v.double().cpu()
    qd = q.double().cpu()
    page_table = batch.page_table.cpu()
    rep = layer.num_heads // layer.num_kv_heads
    out = torch.zeros_like(qd)
    row = 0
    for i, (prefix, extend) in enumerate(zip(batch.prefix_lens_cpu, batch.extend_lens_cpu, strict=True)):
        seq = prefix + extend
        slots = torch.tensor([int(page_table[i, j // ps]) * ps + j % ps for j in range(seq)], dtype=torch.int64)
        keys = k_cache[slots].repeat_interleave(rep, dim=1)  # (S, H, D)
        vals = v_cache[slots].repeat_interleave(rep, dim=1)
        q_pos = torch.arange(prefix, seq)[:, None]
        k_pos = torch.arange(seq)[None, :]
        visible = k_pos <= q_pos  # (E, S)
        if layer.sliding_window is not None:
            visible &= k_pos > q_pos - layer.sliding_window
        scores = torch.einsum("ehd,shd->hes", qd[row : row + extend], keys) * layer.scale
        cap = getattr(layer, "logit_softcap", None)
        if cap:
            scores = cap * torch.tanh(scores / cap)
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        out[row : row + extend] = torch.einsum("hes,shd->ehd", probs, vals)
        row += extend
    return out


def reference_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """float64 ``x @ weight.T + bias``."""
    out = x.double().cpu() @ weight.double().cpu().T
    return out if bias is None else out + bias.double().cpu()


def reference_moe(
    x: torch.Tensor,
    experts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    """float64 routed experts, one token and one expert at a time: ``out[t] = sum_j w[t, j] *
    down_e(act(gate_e(x[t])) * up_e(x[t]))``; ``experts[e]`` is (gate (I, H), up (I, H), down (H, I))."""
    from hinge.layers.activation import get_activation

    act = get_activation(activation)
    xd = x.double().cpu()
    out = torch.zeros_like(xd)
    for t in range(xd.shape[0]):
        for j in range(topk_ids.shape[1]):
            gate, up, down = (w.double().cpu() for w in experts[int(topk_ids[t, j])])
            hidden = act(gate @ xd[t]) * (up @ xd[t])
            out[t] += float(topk_weights[t, j]) * (down @ hidden)
    return out


def reference_gated_delta_rule(q, k, v, g, beta, s0):
    """The gated delta rule token by token in float64, for recurrent-kernel tests.

    q, k (T, Hk, Dk), v (T, Hv, Dv), g (decay logs) and beta (T, Hv), s0 (Hv, Dk, Dv); q and k are
    L2-normalised (q also scaled by Dk^-0.5) and repeated to the Hv value heads, as the kernels do.
    Returns (outputs (T, Hv, Dv), final state, the state after every token (T, Hv, Dk, Dv)).
    """
    rep = v.shape[1] // q.shape[1]
    q, k = (x.double().repeat_interleave(rep, dim=1) for x in (q, k))
    q = q / q.norm(dim=-1, keepdim=True) * q.shape[-1] ** -0.5
    k = k / k.norm(dim=-1, keepdim=True)
    s, outs, states = s0.double().clone(), [], []
    for t in range(q.shape[0]):
        s = s * g[t].double().exp()[:, None, None]
        err = v[t].double() - torch.einsum("hk,hkv->hv", k[t], s)
        s = s + k[t][:, :, None] * (beta[t].double()[:, None] * err)[:, None, :]
        outs.append(torch.einsum("hk,hkv->hv", q[t], s))
        states.append(s.clone())
    return torch.stack(outs), s, torch.stack(states)
