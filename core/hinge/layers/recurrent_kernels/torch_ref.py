"""Pure-torch reference kernels (any device): chunked delta rule for prefill, recurrent for decode.

Requests of equal length run together as one batch; the others run one by one. The chunked form
(chunks of 64 tokens, the WY/UT transform inside a chunk, a sequential scan across chunks) is used
for multi-token segments; the recurrent form for single tokens and whenever per-position states
are asked for (it produces them for free).

``deterministic``: every token goes through the recurrent form, requests in zero-padded blocks of
``BLOCK_ROWS`` rows, each op of fixed shape and element-wise or reduced over one head's vector. A
request's bits then depend only on its own tokens and state: the same alone or in any batch, and
for any chunking of its prefill (the state after a token is the same whatever came in one step).
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F

from hinge.layers.recurrent_kernels.base import ConvResult, DeltaRuleResult, RecurrentKernels

CHUNK_SIZE = 64
BLOCK_ROWS = 16


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _segments(cu_seqlens: list[int]) -> list[tuple[int, int]]:
    return list(pairwise(cu_seqlens))


def _uniform_len(cu_seqlens: list[int]) -> int | None:
    lens = {e - s for s, e in _segments(cu_seqlens)}
    return lens.pop() if len(lens) == 1 else None


# ---------------------------------------------------------------------------------------------
# causal conv1d
# ---------------------------------------------------------------------------------------------


def _conv_windows(xs: torch.Tensor, weight, bias, activation, track):
    """xs: (N, K-1+L, C) window then inputs -> out (N, L, C), final (N, C, K-1), per-row windows."""
    k = weight.shape[1]
    taps = xs.unfold(1, k, 1)  # (N, L, C, K): taps[:, t] = xs[:, t:t+K]
    w = weight.float()
    out = taps[..., 0].float() * w[:, 0]
    for j in range(1, k):  # NOTE: element-wise in a fixed order: batch and chunking invariant
        out = out + taps[..., j].float() * w[:, j]
    if bias is not None:
        out = out + bias.float()
    if activation == "silu":
        out = F.silu(out)
    elif activation is not None:
        raise ValueError(f"conv activation {activation!r} is not supported; use None or 'silu'")
    final = xs[:, xs.shape[1] - (k - 1) :].transpose(1, 2)
    windows = taps[..., 1:] if track else None  # window after row t: xs[t+1 : t+K]
    return out.to(xs.dtype), final, windows


def torch_causal_conv1d(
    x, weight, bias, initial_window, cu_seqlens, *, activation=None, track_states=False
):
    b = len(cu_seqlens) - 1
    window = initial_window.to(x.dtype).transpose(1, 2)  # (B, K-1, C)
    n = _uniform_len(cu_seqlens)
    if n is not None:
        xs = torch.cat([window, x.view(b, n, -1)], dim=1)
        out, final, windows = _conv_windows(xs, weight, bias, activation, track_states)
        windows = windows.flatten(0, 1) if windows is not None else None
        return ConvResult(out.flatten(0, 1), final.contiguous(), windows)
    outs, finals, all_windows = [], [], []
    for i, (s, e) in enumerate(_segments(cu_seqlens)):
        xs = torch.cat([window[i], x[s:e]], dim=0)[None]
        out, final, windows = _conv_windows(xs, weight, bias, activation, track_states)
        outs.append(out[0])
        finals.append(final[0])
        if windows is not None:
            all_windows.append(windows[0])
    windows = torch.cat(all_windows) if track_states else None
    return ConvResult(torch.cat(outs), torch.stack(finals).contiguous(), windows)


# ---------------------------------------------------------------------------------------------
# gated delta rule (inputs already normalised, scaled, head-expanded, float32)
# ---------------------------------------------------------------------------------------------


def delta_rule_recurrent(q, k, v, g, beta, state, track=False):
    """q, k: (N, L, H, Dk); v: (N, L, H, Dv); g, beta: (N, L, H); state: (N, H, Dk, Dv)."""
    n, length = q.shape[:2]
    out = v.new_empty(v.shape)
    states = q.new_empty((n, length, *state.shape[1:])) if track else None
    for t in range(length):
        state = state * g[:, t].exp()[..., None, None]
        kv_mem = torch.einsum("nhk,nhkv->nhv", k[:, t], state)
        delta = (v[:, t] - kv_mem) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = torch.einsum("nhk,nhkv->nhv", q[:, t], state)
        if track:
            states[:, t] = state
    return out, state, states


def delta_rule_chunked(q, k, v, g, beta, state, chunk_size=CHUNK_SIZE):
    """One sequence. q, k: (L, H, Dk); v: (L, H, Dv); g, beta: (L, H); state: (H, Dk, Dv)."""
    q, k, v = (x.transpose(0, 1) for x in (q, k, v))  # (H, L, D)
    g, beta = g.transpose(0, 1), beta.transpose(0, 1)  # (H, L)
    out = torch.empty_like(v)
    for s in range(0, q.shape[1], chunk_size):
        e = min(s + chunk_size, q.shape[1])
        qc, kc, vc, bc = q[:, s:e], k[:, s:e], v[:, s:e], beta[:, s:e, None]
        cum = g[:, s:e].cumsum(-1)  # (H, C) log decay from chunk start to t
        lower = torch.ones(e - s, e - s, dtype=torch.bool, device=q.device).tril()
        decay = (cum[:, :, None] - cum[:, None, :]).masked_fill(~lower, float("-inf")).exp()
        # UT transform: (I + strictly-lower(beta k k^T * decay)) u = beta v, w = beta k exp(cum)
        system = (bc * kc) @ kc.transpose(-1, -2) * decay
        system = system.masked_fill(~lower.tril(-1), 0.0)
        system = system + torch.eye(e - s, dtype=q.dtype, device=q.device)
        rhs = torch.cat([bc * vc, bc * kc * cum.exp()[..., None]], dim=-1)
        sol = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        u, w = sol[..., : vc.shape[-1]], sol[..., vc.shape[-1] :]
        v_new = u - w @ state
        intra = (qc @ kc.transpose(-1, -2)) * decay
        out[:, s:e] = (qc * cum.exp()[..., None]) @ state + intra @ v_new
        tail = (cum[:, -1:] - cum).exp()[..., None]  # decay from t to chunk end
        state = state * cum[:, -1].exp()[:, None, None] + (kc * tail).transpose(-1, -2) @ v_new
    return out.transpose(0, 1), state


def delta_rule_deterministic(q, k, v, g, beta, initial_state, cu_seqlens, track_states):
    """Token by token, requests in fixed blocks of BLOCK_ROWS rows (see the module docstring)."""
    b, t = len(cu_seqlens) - 1, q.shape[0]
    hv, dv = v.shape[1:]
    steps, b_pad = max(e - s for s, e in _segments(cu_seqlens)), -(-b // BLOCK_ROWS) * BLOCK_ROWS
    # (b_pad, steps) grid of rows; padding keeps the state: g = 0 (decay 1), beta = 0 (no write)
    index = torch.full((b_pad, steps), t, dtype=torch.long, device=q.device)
    for i, (s, e) in enumerate(_segments(cu_seqlens)):
        index[i, : e - s] = torch.arange(s, e, device=q.device)

    def grid(x):
        padded = torch.cat([x.float(), x.new_zeros((1, *x.shape[1:]), dtype=torch.float32)])
        return padded[index]

    qg, kg, vg, gg, bg = grid(q), grid(k), grid(v), grid(g), grid(beta)
    state = torch.zeros(b_pad, *initial_state.shape[1:], dtype=torch.float32, device=q.device)
    state[:b] = initial_state.float()
    out = torch.zeros(b_pad, steps, hv, dv, device=q.device)
    states = torch.zeros(b_pad, steps, *state.shape[1:], device=q.device) if track_states else None
    rep = hv // q.shape[1]
    for r in range(0, b_pad, BLOCK_ROWS):
        blk = slice(r, r + BLOCK_ROWS)
        s_blk = state[blk]
        for i in range(steps):
            q_t, k_t = l2norm(qg[blk, i]), l2norm(kg[blk, i])
            q_t = q_t * q_t.shape[-1] ** -0.5
            if rep > 1:
                q_t, k_t = q_t.repeat_interleave(rep, dim=1), k_t.repeat_interleave(rep, dim=1)
            s_blk = s_blk * gg[blk, i].exp()[..., None, None]
            kv_mem = (s_blk * k_t[..., None]).sum(dim=-2)
            delta = (vg[blk, i] - kv_mem) * bg[blk, i][..., None]
            s_blk = s_blk + k_t[..., None] * delta[..., None, :]
            out[blk, i] = (s_blk * q_t[..., None]).sum(dim=-2)
            if track_states:
                states[blk, i] = s_blk
        state[blk] = s_blk
    valid = index[:b] < t
    rows = index[:b][valid]
    result = out.new_empty(t, hv, dv)
    result[rows] = out[:b][valid]
    pos = None
    if track_states:
        pos = states.new_empty(t, *state.shape[1:])
        pos[rows] = states[:b][valid]
    return result, state[:b], pos


def prepare_qk(q, k, num_v_heads):
    """L2-normalise q/k in float32, scale q by Dk^-0.5, expand heads to the value heads."""
    q, k = l2norm(q.float()), l2norm(k.float())
    q = q * q.shape[-1] ** -0.5
    rep = num_v_heads // q.shape[-2]
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=-2), k.repeat_interleave(rep, dim=-2)
    return q, k


def torch_gated_delta_rule(
    q, k, v, g, beta, initial_state, cu_seqlens, *, track_states=False, deterministic=False
):
    out_dtype = q.dtype
    if deterministic:
        out, final, states = delta_rule_deterministic(
            q, k, v, g, beta, initial_state, cu_seqlens, track_states
        )
        return DeltaRuleResult(out.to(out_dtype), final, states)
    q, k = prepare_qk(q, k, v.shape[-2])
    v, g, beta = v.float(), g.float(), beta.float()
    state0 = initial_state.float()
    b, t = len(cu_seqlens) - 1, q.shape[0]
    n = _uniform_len(cu_seqlens)
    if n is not None and (n == 1 or track_states):
        args = (x.reshape(b, n, *x.shape[1:]) for x in (q, k, v, g, beta))
        out, final, states = delta_rule_recurrent(*args, state0, track_states)
        states = states.flatten(0, 1) if states is not None else None
        return DeltaRuleResult(out.flatten(0, 1).to(out_dtype), final, states)
    out = v.new_empty((t, *v.shape[1:]))
    finals = []
    states = q.new_empty((t, *state0.shape[1:])) if track_states else None
    for i, (s, e) in enumerate(_segments(cu_seqlens)):
        if track_states or e - s == 1:
            seg = (x[None, s:e] for x in (q, k, v, g, beta))
            o, final, st = delta_rule_recurrent(*seg, state0[i : i + 1], track_states)
            out[s:e], final = o[0], final[0]
            if track_states:
                states[s:e] = st[0]
        else:
            out[s:e], final = delta_rule_chunked(
                q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], state0[i]
            )
        finals.append(final)
    return DeltaRuleResult(out.to(out_dtype), torch.stack(finals), states)


class TorchRecurrentKernels(RecurrentKernels):
    name = "torch"

    def __init__(self, deterministic: bool = False) -> None:
        self.deterministic = deterministic

    def causal_conv1d(
        self, x, weight, bias, initial_window, cu_seqlens, *, activation=None, track_states=False
    ):
        return torch_causal_conv1d(
            x,
            weight,
            bias,
            initial_window,
            cu_seqlens,
            activation=activation,
            track_states=track_states,
        )

    def gated_delta_rule(self, q, k, v, g, beta, initial_state, cu_seqlens, *, track_states=False):
        return torch_gated_delta_rule(
            q, k, v, g, beta, initial_state, cu_seqlens, track_states=track_states,
            deterministic=self.deterministic,
        )
