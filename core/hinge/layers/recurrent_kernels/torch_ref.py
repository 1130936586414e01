"""Pure-torch reference kernels (any device): chunked delta rule for prefill, recurrent for decode.

No Python loop over requests on the hot paths: single-token requests (decode) run as one batched
recurrent update; multi-token segments run the chunked form (chunks of 32 tokens, the WY/UT
transform inside a chunk, a sequential scan across chunks), segments with the same number of
64-token blocks zero-padded at the end (g = beta = k = 0 rows leave the state unchanged) and batched; the
causal conv runs over all requests in one flat pass. The recurrent form, one request at a time
unless all have equal length, is used whenever per-position states are asked for (it produces
them for free).

``deterministic``: every token goes through the recurrent form, requests in zero-padded blocks of
``BLOCK_ROWS`` rows, each op of fixed shape and element-wise or reduced over one head's vector. A
request's bits then depend only on its own tokens and state: the same alone or in any batch, and
for any chunking of its prefill (the state after a token is the same whatever came in one step).
On CUDA the same recurrence runs as one Triton kernel per call (``delta_rule_triton``).
"""

from __future__ import annotations

import functools
from itertools import pairwise

import torch
import torch.nn.functional as F

from hinge.devices import to_device
from hinge.layers.recurrent_kernels.base import ConvResult, DeltaRuleResult, RecurrentKernels

CHUNK_SIZE = 32  #: on CPU 32 beats 64 by ~25% for 64-128-token segments (O(C) work per token)
BUCKET_SIZE = 64  #: segments with the same number of BUCKET_SIZE blocks are batched together
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


def check_conv_activation(activation: str | None) -> None:
    """The conv activations every conv path takes (None or ``"silu"``); others are refused before
    anything runs."""
    if activation not in (None, "silu"):
        raise ValueError(f"conv activation {activation!r} is not supported; use None or 'silu'")


def conv_activation(out: torch.Tensor, activation: str | None, deterministic: bool) -> torch.Tensor:
    """The conv's activation (None or ``"silu"``) on its float32 sum, the one place it is written
    (``conv_in_pool_exact`` applies it too, so an in-pool decode row has a prefill row's bits).
    ``deterministic`` on CPU: in fixed 16-row blocks (``hinge.layers.batch_invariant``)."""
    check_conv_activation(activation)
    if activation == "silu" and deterministic and not out.is_cuda:
        from hinge.layers.batch_invariant import _blockwise

        return _blockwise(out, F.silu)
    if activation == "silu":
        return F.silu(out)
    return out


def _conv_windows(xs: torch.Tensor, weight, bias, activation, track, deterministic=False):
    """xs: (N, K-1+L, C) window then inputs -> out (N, L, C), final (N, C, K-1), per-row windows.

    ``deterministic``: the activation runs in fixed 16-row blocks on CPU (its bits must not depend
    on the step's size: ``hinge.layers.batch_invariant``)."""
    k = weight.shape[1]
    taps = xs.unfold(1, k, 1)  # (N, L, C, K): taps[:, t] = xs[:, t:t+K]
    w = weight.float()
    out = taps[..., 0].float() * w[:, 0]
    for j in range(1, k):  # NOTE: element-wise in a fixed order: batch and chunking invariant
        out = out + taps[..., j].float() * w[:, j]
    if bias is not None:
        out = out + bias.float()
    out = conv_activation(out, activation, deterministic)
    final = xs[:, xs.shape[1] - (k - 1) :].transpose(1, 2)
    windows = taps[..., 1:] if track else None  # window after row t: xs[t+1 : t+K]
    return out.to(xs.dtype), final, windows


@functools.lru_cache(maxsize=16)
def _conv_layout(cu_seqlens: tuple[int, ...], k: int, device: torch.device):
    """Index tensors of the flat conv layout ``[window_0 | x_0 | window_1 | x_1 | ...]`` (source
    rows of ``cat([x, windows])``, output rows, final-window rows). Cached: every recurrent layer
    of a step shares one host computation and one copy to the device."""
    t = cu_seqlens[-1]
    src, out_rows, final_rows, base = [], [], [], 0
    for i, (s, e) in enumerate(_segments(list(cu_seqlens))):
        src.extend(range(t + i * (k - 1), t + (i + 1) * (k - 1)))
        src.extend(range(s, e))
        out_rows.extend(range(base, base + e - s))
        final_rows.extend(range(base + e - s, base + e - s + k - 1))
        base += e - s + k - 1
    return tuple(to_device(x, torch.int64, device) for x in (src, out_rows, final_rows))


def torch_causal_conv1d(
    x, weight, bias, initial_window, cu_seqlens, *, activation=None, track_states=False,
    deterministic=False,
):
    """All requests in one pass: each request's window rows go in front of its inputs, the taps
    run over the flat ``(T + B (K-1), C)`` sequence, and only each request's own rows are kept.
    Every output row is the same element-wise sum as alone (bit-identical to one request)."""
    b = len(cu_seqlens) - 1
    k = weight.shape[1]
    window = initial_window.to(x.dtype).transpose(1, 2)  # (B, K-1, C)
    n = _uniform_len(cu_seqlens)
    if n is not None:
        xs = torch.cat([window, x.view(b, n, -1)], dim=1)
        out, final, windows = _conv_windows(xs, weight, bias, activation, track_states, deterministic)
        windows = windows.flatten(0, 1) if windows is not None else None
        return ConvResult(out.flatten(0, 1), final.contiguous(), windows)
    src, out_idx, final_idx = _conv_layout(tuple(cu_seqlens), k, x.device)
    pool = torch.cat([x, window.reshape(-1, x.shape[1])])
    xs = pool.index_select(0, src)[None]
    out, _, windows = _conv_windows(xs, weight, bias, activation, track_states, deterministic)
    final = xs[0].index_select(0, final_idx).view(b, k - 1, -1)
    windows = windows[0].index_select(0, out_idx) if windows is not None else None
    return ConvResult(out[0].index_select(0, out_idx), final.transpose(1, 2).contiguous(), windows)


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


def delta_rule_decode(q, k, v, g, beta, state):
    """One token per request. q, k: (N, H, Dk); v: (N, H, Dv); g, beta: (N, H); state (N, H, Dk, Dv).

    With ``d = exp(g)`` and ``S' = d S + k delta^T``: ``k^T (d S) = d (k^T S)`` and
    ``q^T S' = d (q^T S) + (q . k) delta``, so one bmm reads the old state for both products and
    the new state is written once (scaled in place, then the rank-1 update added in place).
    """
    n, h, dk = k.shape
    nh = n * h
    decay = g.exp().reshape(nh, 1, 1)
    state = state.reshape(nh, dk, -1)
    kq = torch.stack([k.reshape(nh, dk), q.reshape(nh, dk)], dim=1)  # (NH, 2, Dk)
    proj = torch.bmm(kq, state) * decay  # (NH, 2, Dv): d k^T S, d q^T S
    delta = (v.reshape(nh, 1, -1) - proj[:, :1]) * beta.reshape(nh, 1, 1)
    qk = (kq[:, 1] * kq[:, 0]).sum(-1).reshape(nh, 1, 1)
    out = torch.addcmul(proj[:, 1:], qk, delta)
    new = state * decay  # NOTE: not in place: the caller's initial state stays untouched
    new.baddbmm_(kq[:, 0, :, None], delta)
    return out.view(n, h, -1), new.view(n, h, dk, -1)


def delta_rule_chunked(q, k, v, g, beta, state, chunk_size=CHUNK_SIZE):
    """Sequences of equal length L. q, k: (N, L, H, Dk); v: (N, L, H, Dv); g, beta: (N, L, H);
    state: (N, H, Dk, Dv). Also accepts one unbatched sequence (no N dimension).

    Zero rows (g = beta = k = 0) at the end leave the state unchanged, so shorter sequences can
    be padded to L, and L is padded to whole chunks here.
    """
    if q.dim() == 3:
        out, state = delta_rule_chunked(*(x[None] for x in (q, k, v, g, beta, state)), chunk_size)
        return out[0], state[0]
    n, length, h = q.shape[:3]
    c = min(chunk_size, length)
    padded = -(-length // c) * c
    packed = torch.cat([q, k, v, g[..., None], beta[..., None]], dim=-1)  # (N, L, H, F)
    if padded > length:
        packed = torch.cat([packed, packed.new_zeros((n, padded - length, *packed.shape[2:]))], 1)
    out, state = _chunked_packed(packed.transpose(1, 2).contiguous(), q.shape[-1], state, c)
    return out[:, :, :length].transpose(1, 2), state


def _chunked_packed(packed, dk, state, c):
    """packed: (N, H, L, F) contiguous rows ``[q | k | v | g | beta]``, L a multiple of ``c``
    -> out (N, H, L, Dv), final state. Everything that does not depend on the state (decays,
    the UT transform, intra-chunk attention) runs for all chunks at once; only the scan across
    chunks is a loop."""
    n, h, length, f = packed.shape
    nc, dv = length // c, f - 2 * dk - 2
    packed = packed.view(n, h, nc, c, f)
    q, k, v = packed[..., :dk], packed[..., dk : 2 * dk], packed[..., 2 * dk : 2 * dk + dv]
    g, beta = packed[..., f - 2], packed[..., f - 1]
    cum = g.cumsum(-1)  # (N, H, nc, C) log decay from chunk start to t
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    # UT transform: (I + strictly-lower(beta k k^T * decay)) u = beta v, w = beta k exp(cum)
    bk = beta[..., None] * k
    system = (bk @ k.transpose(-1, -2) * decay).masked_fill(~lower.tril(-1), 0.0)
    system = system + torch.eye(c, dtype=q.dtype, device=q.device)
    rhs = torch.cat([beta[..., None] * v, bk * cum.exp()[..., None]], dim=-1)
    sol = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = sol[..., :dv], sol[..., dv:]
    intra = (q @ k.transpose(-1, -2)) * decay
    q_decayed = q * cum.exp()[..., None]
    k_tail = (k * (cum[..., -1:] - cum).exp()[..., None]).transpose(-1, -2)  # decay t -> chunk end
    last = cum[..., -1].exp()[..., None, None]  # (N, H, nc, 1, 1)
    out = q.new_empty((n, h, nc, c, dv))
    for i in range(nc):
        v_new = u[:, :, i] - w[:, :, i] @ state
        out[:, :, i] = q_decayed[:, :, i] @ state + intra[:, :, i] @ v_new
        state = state * last[:, :, i] + k_tail[:, :, i] @ v_new
    return out.view(n, h, length, dv), state


def _chunked_buckets(q, k, v, g, beta, state0, segments, out, finals):
    """Run the chunked form on every segment not None; segments with the same number of
    ``BUCKET_SIZE`` blocks are zero-padded at the end to the longest of them (rounded up to
    whole chunks) and run as one batch. q, k, v, g, beta are packed into one row tensor first, so
    the padding is one gather."""
    buckets: dict[int, list[int]] = {}
    for i, seg in enumerate(segments):
        if seg is not None:
            buckets.setdefault(-(-(seg[1] - seg[0]) // BUCKET_SIZE), []).append(i)
    dev, t, h, dk = q.device, q.shape[0], q.shape[1], q.shape[2]
    # (T + 1, H, F) with a zero row at T that the padding positions gather
    packed = torch.cat([q, k, v, g[..., None], beta[..., None]], dim=-1)
    packed = torch.cat([packed, packed.new_zeros((1, *packed.shape[1:]))])
    for members in buckets.values():
        longest = max(segments[i][1] - segments[i][0] for i in members)
        c = min(CHUNK_SIZE, longest)
        length = -(-longest // c) * c
        index, ids, src, dst = _bucket_layout(tuple(segments[i] for i in members), tuple(members),
                                              length, t, dev)
        m = len(members)
        rows = packed.index_select(0, index).view(m, length, h, -1)
        o, final = _chunked_packed(rows.transpose(1, 2).contiguous(), dk,
                                   state0.index_select(0, ids), c)
        o = o.transpose(1, 2).reshape(m * length, h, -1)
        out.index_copy_(0, src, o.index_select(0, dst))
        finals.index_copy_(0, ids, final)


@functools.lru_cache(maxsize=32)
def _bucket_layout(segments: tuple[tuple[int, int], ...], members: tuple[int, ...], length: int,
                   t: int, device: torch.device):
    """Index tensors of one padded bucket (gather rows, member ids, scatter source/destination),
    cached so every recurrent layer of a step shares one host computation and one copy."""
    index, src, dst = [], [], []
    for j, (s, e) in enumerate(segments):
        index.extend(range(s, e))
        index.extend([t] * (length - (e - s)))
        src.extend(range(s, e))
        dst.extend(range(j * length, j * length + e - s))
    return tuple(to_device(x, torch.int64, device) for x in (index, list(members), src, dst))


@functools.lru_cache(maxsize=16)
def _grid_layout(cu_seqlens: tuple[int, ...], b_pad: int, steps: int, device: torch.device) -> torch.Tensor:
    """The (b_pad, steps) token rows of the deterministic grid (``T`` = the zero row where a
    request has no token), built on the host once per step layout: no op per request."""
    t = cu_seqlens[-1]
    index = [[t] * steps for _ in range(b_pad)]
    for i, (s, e) in enumerate(_segments(list(cu_seqlens))):
        index[i][: e - s] = range(s, e)
    return to_device(index, torch.int64, device)


def delta_rule_deterministic(q, k, v, g, beta, initial_state, cu_seqlens, track_states):
    """Token by token, requests in fixed blocks of BLOCK_ROWS rows (see the module docstring)."""
    b, t = len(cu_seqlens) - 1, q.shape[0]
    hv, dv = v.shape[1:]
    steps, b_pad = max(e - s for s, e in _segments(cu_seqlens)), -(-b // BLOCK_ROWS) * BLOCK_ROWS
    # (b_pad, steps) grid of rows; padding keeps the state: g = 0 (decay 1), beta = 0 (no write)
    index = _grid_layout(tuple(cu_seqlens), b_pad, steps, q.device)

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


@functools.lru_cache(maxsize=16)
def _single_layout(ids: tuple[int, ...], rows: tuple[int, ...], device: torch.device):
    return to_device(list(ids), torch.int64, device), to_device(list(rows), torch.int64, device)


def torch_gated_delta_rule(
    q, k, v, g, beta, initial_state, cu_seqlens, *, track_states=False, deterministic=False
):
    out_dtype = q.dtype
    if deterministic:
        if q.is_cuda:  # the same recurrence, one Triton kernel instead of a loop of torch ops
            from hinge.layers.recurrent_kernels.delta_rule_triton import gated_delta_rule

            return DeltaRuleResult(*gated_delta_rule(q, k, v, g, beta, initial_state, cu_seqlens,
                                                     track_states))
        out, final, states = delta_rule_deterministic(
            q, k, v, g, beta, initial_state, cu_seqlens, track_states
        )
        return DeltaRuleResult(out.to(out_dtype), final, states)
    q, k = prepare_qk(q, k, v.shape[-2])
    v, g, beta = v.float(), g.float(), beta.float()
    state0 = initial_state.float()
    b, t = len(cu_seqlens) - 1, q.shape[0]
    n = _uniform_len(cu_seqlens)
    if n == 1 and not track_states:
        out, final = delta_rule_decode(q, k, v, g, beta, state0)
        return DeltaRuleResult(out.to(out_dtype), final, None)
    if n is not None and track_states:
        args = (x.reshape(b, n, *x.shape[1:]) for x in (q, k, v, g, beta))
        out, final, states = delta_rule_recurrent(*args, state0, track_states)
        states = states.flatten(0, 1) if states is not None else None
        return DeltaRuleResult(out.flatten(0, 1).to(out_dtype), final, states)
    segments = _segments(cu_seqlens)
    if track_states:  # per-position states come free with the recurrent form
        out = v.new_empty((t, *v.shape[1:]))
        states = q.new_empty((t, *state0.shape[1:]))
        finals = []
        for i, (s, e) in enumerate(segments):
            seg = (x[None, s:e] for x in (q, k, v, g, beta))
            o, final, st = delta_rule_recurrent(*seg, state0[i : i + 1], True)
            out[s:e], states[s:e] = o[0], st[0]
            finals.append(final[0])
        return DeltaRuleResult(out.to(out_dtype), torch.stack(finals), states)
    out = v.new_empty((t, *v.shape[1:]))
    finals = state0.new_empty(state0.shape)
    single = [i for i, (s, e) in enumerate(segments) if e - s == 1]
    if single:  # decode rows of a mixed step: one batched recurrent update
        ids, rows = _single_layout(tuple(single), tuple(segments[i][0] for i in single), q.device)
        o, final = delta_rule_decode(*(x.index_select(0, rows) for x in (q, k, v, g, beta)),
                                     state0.index_select(0, ids))
        out.index_copy_(0, rows, o)
        finals.index_copy_(0, ids, final)
    if len(single) < b:
        many = [seg if seg[1] - seg[0] > 1 else None for seg in segments]
        _chunked_buckets(q, k, v, g, beta, state0, many, out, finals)
    return DeltaRuleResult(out.to(out_dtype), finals, None)


class TorchRecurrentKernels(RecurrentKernels):
    name = "torch"

    def __init__(self, deterministic: bool = False) -> None:
        self.deterministic = deterministic

    def prefill_conv(self):
        """The one-kernel CUDA conv this kernel set takes where no per-position windows are asked
        for, or None for the reference everywhere: deterministic mode's ``conv_prefill_exact``
        (the reference's bits); ``FlaRecurrentKernels`` takes ``conv_prefill``."""
        if not self.deterministic:
            return None
        from hinge.layers.recurrent_kernels.conv_prefill import conv_prefill_exact

        return conv_prefill_exact

    def causal_conv1d(
        self, x, weight, bias, initial_window, cu_seqlens, *, activation=None, track_states=False
    ):
        """``prefill_conv``'s kernel on CUDA (``HINGE_FAST_KERNELS=0`` takes the reference) for a
        step without per-position windows; the reference otherwise."""
        from hinge.layers import fast_triton

        fast = None if track_states else self.prefill_conv()
        if (fast is not None and fast_triton.enabled(x, self.deterministic, invariant=True)
                and x.stride(-1) == 1 and weight.stride(-1) == 1 and weight.shape[1] >= 2):
            return fast(x, weight, bias, initial_window, list(cu_seqlens), activation=activation)
        return torch_causal_conv1d(
            x,
            weight,
            bias,
            initial_window,
            cu_seqlens,
            activation=activation,
            track_states=track_states,
            deterministic=self.deterministic,
        )

    def gated_delta_rule(self, q, k, v, g, beta, initial_state, cu_seqlens, *, track_states=False):
        return torch_gated_delta_rule(
            q, k, v, g, beta, initial_state, cu_seqlens, track_states=track_states,
            deterministic=self.deterministic,
        )

    def conv_in_pool(self, x, weight, bias, pool, read_slots, write_slots, prefix_lens, *,
                     activation=None):
        """On CUDA the Triton kernel in place: ``conv_in_pool`` in default mode,
        ``conv_in_pool_exact`` in deterministic mode (the torch conv's bits: a decode row must be
        the bits of a prefill row). CPU has no in-place path."""
        from hinge.layers.fast_triton import triton_available

        if not x.is_cuda or not triton_available():
            return None
        from hinge.layers.recurrent_kernels import conv_in_pool as kernel

        run = kernel.conv_in_pool_exact if self.deterministic else kernel.conv_in_pool
        return run(x, weight, bias, pool, read_slots, write_slots, prefix_lens, activation=activation)

    def decode_in_pool(self, q, k, v, g, beta, pool, read_slots, write_slots, prefix_lens):
        """Deterministic on CUDA: the Triton kernel in place (the same bits as the token-recurrence
        kernel's decode rows). The reference elsewhere has no in-place path."""
        if not (self.deterministic and q.is_cuda):
            return None
        from hinge.layers.recurrent_kernels.decode_in_pool import decode_in_pool

        return decode_in_pool(q, k, v, g, beta, pool, read_slots, write_slots, prefix_lens)
