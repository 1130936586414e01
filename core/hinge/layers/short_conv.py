"""LFM2's gated short convolution: ``out_proj(C * conv(B * x))`` with ``B, C, x = in_proj(h)``.

The conv window (the last ``L - 1`` values of ``B * x``) lives in the state pool, one slot per
request (``ctx.batch.state_slots``); a request with no prefix starts from zeros. States are
written through ``hinge.layers.recurrent_kernels.checkpoints`` (the one write path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.forward import RecurrentLayerSpec
from hinge.layers.gated_deltanet import DepthwiseConv, recurrent_inputs
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


class ShortConv(nn.Module):
    def __init__(self, cfg: Any, layer_idx: int, state_id: int, quantizer: Quantizer, dtype: torch.dtype,
                 kernels: RecurrentKernels, prefix: str = "") -> None:
        super().__init__()
        hidden, bias = cfg.hidden_size, bool(cfg.conv_bias)
        self.hidden_size = hidden
        self.kernels = kernels
        self.in_proj = Linear(hidden, 3 * hidden, bias, quantizer, dtype, f"{prefix}.in_proj")
        self.conv = DepthwiseConv(hidden, cfg.conv_L_cache, bias, dtype)
        self.out_proj = Linear(hidden, hidden, bias, quantizer, dtype, f"{prefix}.out_proj")
        self.spec = RecurrentLayerSpec(
            layer_id=layer_idx, state_id=state_id, conv_dim=hidden, conv_kernel=cfg.conv_L_cache
        )

    def forward(self, h: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        batch, sid = ctx.batch, self.spec.state_id
        slots, fresh = recurrent_inputs(ctx, "short conv")
        gate_b, gate_c, x = self.in_proj(h).chunk(3, dim=-1)
        bx = gate_b * x
        out = self.kernels.conv_in_pool(
            bx, self.conv.weight[:, 0], self.conv.bias, ctx.states.conv[sid], slots,
            step_write_slots(batch), batch.prefix_lens) if decodes_in_pool(batch) else None
        if out is not None:  # the window was read and written in the pool
            write_step_states(ctx, sid, None, None, None)
            return self.out_proj(gate_c * out)
        window, _ = ctx.states.read(sid, slots, fresh)

        def run(rows, states, cu_seqlens):
            r = self.kernels.causal_conv1d(rows[0], self.conv.weight[:, 0], self.conv.bias, states[0],
                                           cu_seqlens, track_states=batch.track_states)
            return (r.out, r.position_windows), (r.final_window,)

        (out, windows), (final,), ck = run_split(run, (bx,), (window,), batch)
        write_step_states(ctx, sid, final, None, None if ck is None else (ck[0], None))
        if batch.track_states:
            ctx.position_states.conv[sid] = windows
        return self.out_proj(gate_c * out)
