"""Gated DeltaNet (Qwen3.5 / Qwen3-Next linear attention) over hinge's flat batch.

    h -> projections -> mixed qkv -> causal conv (silu, window in the state pool) -> q | k | v
      -> gated delta rule (matrix state in the state pool) -> gated RMSNorm(z) -> out_proj

The two checkpoint layouts differ only in the projections: Qwen3.5 has ``in_proj_qkv``,
``in_proj_z``, ``in_proj_b``, ``in_proj_a``; Qwen3-Next fuses them per key-head group into
``in_proj_qkvz`` and ``in_proj_ba``. Either way they load into one ``in_proj`` (one GEMM). Each request reads its state slot (``ctx.batch.state_slots``)
from ``ctx.states``; a request with no prefix starts from zeros; the final state and the step's
checkpoints are written through ``hinge.layers.recurrent_kernels.checkpoints`` (the one write
path), and with ``track_states`` the state after every row goes to ``ctx.position_states``. A decode
step on kernels with an in-place path (fla, deterministic CUDA) runs the delta rule in the pool:
each state is read and written once, where it lies (``RecurrentKernels.decode_in_pool``); on CUDA
the conv window too (``RecurrentKernels.conv_in_pool``: one kernel, three in deterministic mode,
instead of a gather, ~15 small tensor ops and a scatter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from hinge.forward import RecurrentLayerSpec
from hinge.layers import batch_invariant, fast_triton
from hinge.layers.linear import Linear
from hinge.layers.recurrent_kernels.checkpoints import (
    decodes_in_pool,
    run_split,
    step_write_slots,
    write_step_states,
)

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.forward import ForwardContext
    from hinge.layers.recurrent_kernels import RecurrentKernels


class GatedRMSNorm(nn.Module):
    """``weight * normalize(x) * silu(gate)`` per head, as HF's ``RMSNormGated`` (plain weight)."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype, deterministic: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)
        self.eps = eps
        self.deterministic = deterministic

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        if fast_triton.enabled(x, self.deterministic, invariant=True):  # one kernel on CUDA
            fused = fast_triton.kernels().gated_rmsnorm
            if fused.supports(x, gate):  # deterministic: one (token, head) row per program
                return fused.gated_rmsnorm(x, gate, self.weight, self.eps,
                                           rows=1 if self.deterministic else None)
        norm = batch_invariant.rmsnorm if self.deterministic else batch_invariant.rmsnorm_reference
        return (norm(x, self.weight, self.eps) * pointwise(gate.float(), F.silu, self.deterministic)).to(x.dtype)


def pointwise(x: torch.Tensor, op, deterministic: bool) -> torch.Tensor:
    """An element-wise transcendental op. Deterministic on CPU: in the fixed 16-row blocks of
    ``hinge.layers.batch_invariant`` (torch rounds its vectorized body and scalar tail apart, and
    where the tail falls depends on the step's size: a prefix-cache hit resumes at another size)."""
    if not deterministic or x.is_cuda:
        return op(x)
    return batch_invariant._blockwise(x, op)


class DepthwiseConv(nn.Module):
    """Holds ``weight`` (C, 1, K) (and ``bias``) under the checkpoint's names; the kernels run it."""

    def __init__(self, channels: int, kernel: int, bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(channels, dtype=dtype), requires_grad=False) if bias else None


def recurrent_inputs(ctx: ForwardContext, layer: str):
    """The step's state slots and fresh-request mask; a clear error when the engine gave none."""
    batch = ctx.batch
    if ctx.states is None or batch.state_slots is None:
        raise RuntimeError(
            f"{layer} needs a recurrent-state pool: ForwardContext.states (hinge.engine.state_pool."
            "StatePool) and ForwardBatch.state_slots (one slot per request) must be set for hybrid models"
        )
    # host check first: a decode step has no fresh request and skips the zero-fill of the states
    if batch.prefix_lens_cpu and all(batch.prefix_lens_cpu):
        return batch.state_slots, None
    return batch.state_slots, batch.prefix_lens == 0


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: Any, layer_idx: int, state_id: int, quantizer: Quantizer, dtype: torch.dtype,
                 kernels: RecurrentKernels, *, layout: Literal["qwen3_5", "qwen3_next"],
                 deterministic: bool = False, prefix: str = "") -> None:
        super().__init__()
        self.num_k_heads, self.num_v_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        if cfg.hidden_act not in ("silu", "swish"):
            raise ValueError(f"gated DeltaNet conv activation {cfg.hidden_act!r} is not supported; use 'silu'")
        self.layout = layout
        self.kernels = kernels
        hidden = cfg.hidden_size
        lin = dict(quantizer=quantizer, dtype=dtype)
        if layout == "qwen3_5":
            names = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
            sizes: tuple[int, ...] = (self.conv_dim, self.value_dim, self.num_v_heads, self.num_v_heads)
        elif layout == "qwen3_next":
            names = ("in_proj_qkvz", "in_proj_ba")
            sizes = (2 * self.key_dim + 2 * self.value_dim, 2 * self.num_v_heads)
        else:
            raise ValueError(f"gated DeltaNet layout {layout!r} is unknown; use 'qwen3_5' or 'qwen3_next'")
        # NOTE: replicated under tensor parallelism (heads are not split yet)
        self.in_proj = Linear(hidden, sizes, False, prefix=f"{prefix}.in_proj",
                              shard_names=tuple(f"{prefix}.{n}" for n in names), **lin)
        self.in_sizes = list(sizes)
        kernel = cfg.linear_conv_kernel_dim
        self.conv1d = DepthwiseConv(self.conv_dim, kernel, False, dtype)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads, dtype=dtype), requires_grad=False)
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads, dtype=dtype), requires_grad=False)
        self.norm = GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps, dtype, deterministic)
        self.out_proj = Linear(self.value_dim, hidden, False, prefix=f"{prefix}.out_proj", **lin)
        self.spec = RecurrentLayerSpec(
            layer_id=layer_idx, state_id=state_id, conv_dim=self.conv_dim, conv_kernel=kernel,
            ssm_shape=(self.num_v_heads, self.head_k_dim, self.head_v_dim),
        )

    def gates(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(g, beta)``: log decay ``-exp(A_log) * softplus(a + dt_bias)`` (float32) and write
        strength ``sigmoid(b)`` (one element-wise kernel on CUDA: ``fast_triton.gdn_gating``)."""
        det = self.norm.deterministic
        if fast_triton.enabled(b, det, invariant=True):  # element-wise
            fused = fast_triton.kernels().gdn_gating
            if fused.supports(a, b):
                return fused.gdn_gating(a, b, self.A_log, self.dt_bias)
        beta = pointwise(b, torch.sigmoid, det)
        return -self.A_log.float().exp() * pointwise(a.float() + self.dt_bias, F.softplus, det), beta

    def project(self, h: torch.Tensor):
        """(T, hidden) -> mixed qkv (T, conv_dim), z (T, Hv, Dv), b (T, Hv), a (T, Hv)."""
        t = h.shape[0]
        parts = self.in_proj(h).split(self.in_sizes, dim=-1)
        if self.layout == "qwen3_5":
            mixed, z, b, a = parts
            return mixed, z.reshape(t, self.num_v_heads, self.head_v_dim), b, a
        # qwen3_next: per key head [q | k | v (r heads) | z (r heads)], then [b (r) | a (r)]
        r = self.num_v_heads // self.num_k_heads
        qkvz = parts[0].reshape(t, self.num_k_heads, -1)
        dk, dvr = self.head_k_dim, r * self.head_v_dim
        q, k, v, z = torch.split(qkvz, [dk, dk, dvr, dvr], dim=-1)
        b, a = torch.split(parts[1].reshape(t, self.num_k_heads, 2 * r), [r, r], dim=-1)
        mixed = torch.cat([q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1)], dim=-1)
        z = z.reshape(t, self.num_v_heads, self.head_v_dim)
        return mixed, z, b.reshape(t, self.num_v_heads), a.reshape(t, self.num_v_heads)

    def forward(self, h: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        batch, sid = ctx.batch, self.spec.state_id
        slots, fresh = recurrent_inputs(ctx, "gated DeltaNet")
        track = batch.track_states
        t = h.shape[0]
        mixed, z, b, a = self.project(h)
        weight = self.conv1d.weight[:, 0]
        in_pool = decodes_in_pool(batch)
        conv_out = self.kernels.conv_in_pool(
            mixed, weight, None, ctx.states.conv[sid], slots, step_write_slots(batch),
            batch.prefix_lens, activation="silu") if in_pool else None
        if conv_out is not None:  # the window was read and written in the pool
            windows, window, conv_ck = None, None, None
        else:
            conv0, _ = ctx.states.read(sid, slots, fresh, ssm=False)

            def conv_run(rows, states, cu_seqlens):
                r = self.kernels.causal_conv1d(rows[0], weight, None, states[0], cu_seqlens,
                                               activation="silu", track_states=track)
                return (r.out, r.position_windows), (r.final_window,)

            (conv_out, windows), (window,), conv_ck = run_split(conv_run, (mixed,), (conv0,), batch)
        q, k, v = torch.split(conv_out, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(t, self.num_k_heads, self.head_k_dim)
        k = k.reshape(t, self.num_k_heads, self.head_k_dim)
        v = v.reshape(t, self.num_v_heads, self.head_v_dim)
        g, beta = self.gates(a, b)

        rule_out = None
        if in_pool:  # the kernel reads and writes the pool: no gather, no scatter
            rule_out = self.kernels.decode_in_pool(q, k, v, g, beta, ctx.states.ssm[sid], slots,
                                                   step_write_slots(batch), batch.prefix_lens)
        if rule_out is not None:
            positions, state, rule_ck = None, None, None
        else:
            _, ssm0 = ctx.states.read(sid, slots, fresh, conv=False)

            def rule_run(rows, states, cu_seqlens):
                r = self.kernels.gated_delta_rule(*rows, states[0], cu_seqlens, track_states=track)
                return (r.out, r.position_states), (r.final_state,)

            (rule_out, positions), (state,), rule_ck = run_split(rule_run, (q, k, v, g, beta), (ssm0,),
                                                                 batch)
        write_step_states(ctx, sid, window, state,
                          None if conv_ck is None or rule_ck is None else (conv_ck[0], rule_ck[0]))
        if track:
            ctx.position_states.conv[sid] = windows
            ctx.position_states.ssm[sid] = positions
        out = self.norm(rule_out, z)
        return self.out_proj(out.reshape(t, self.value_dim))
