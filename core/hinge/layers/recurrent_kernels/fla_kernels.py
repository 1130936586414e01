"""GPU path: fla-core's Triton kernels for the gated delta rule (CUDA only, imported lazily).

Prefill runs ``chunk_gated_delta_rule`` over the packed batch (``cu_seqlens``, one initial state
per request; bf16/fp16 only, float32 prefill falls back to the reference), its chunk indices
made on the host once per step (``_chunk_indices``: no device sync in the layers); decode
(every request one token) runs hinge's ``decode_in_pool`` kernel (default mode's tiling), which reads and writes the state pool in place
(fla's ``fused_recurrent_gated_delta_rule`` takes a contiguous batch of states and returns a new
one: the layer would gather and scatter every state around it, three times the bytes; it remains
the decode path of ``gated_delta_rule`` called with gathered states). The prefill's short
convolution is one Triton kernel (``conv_prefill``; ``HINGE_FAST_KERNELS=0`` takes the
reference); per-position states and windows (verify
steps, a few tokens) use the torch reference, which runs on CUDA as is.

Short prefills take the token recurrence: a prefill step whose longest request has at most
``HINGE_TOKEN_RECURRENCE_MAX`` tokens (default ``TOKEN_RECURRENCE_DEFAULT`` = 128; 0 = never) runs
hinge's token-recurrence kernel (``delta_rule_triton``, one launch a layer, as deterministic mode
does) instead of fla's chunk pipeline (about seven autotuned launches a layer, whose host time a
short prefill cannot hide). On the H200 (2026-12-02, docs/benchmarks.md, eighth session) the
Qwen3.5-9B-shape hybrid's time to first token of a 128-token prompt went from 80.0 to 46.3 ms
warm with it, decode unchanged; longer prompts were not measured, so the default stops at the
measured length. The start-up warm-up runs a prompt on each side of the switch
(``warmup_prompt_lengths``), so both paths are compiled before the first request.
"""

from __future__ import annotations

import functools
import os
from itertools import pairwise

import torch

from hinge.devices import to_device
from hinge.layers.recurrent_kernels.base import DeltaRuleResult
from hinge.layers.recurrent_kernels.torch_ref import TorchRecurrentKernels, _uniform_len

#: the chunk size of fla's ``chunk_gated_delta_rule`` (its autograd function's default)
FLA_CHUNK = 64
#: the environment variable of the short-prefill switch (module docstring)
TOKEN_RECURRENCE_ENV = "HINGE_TOKEN_RECURRENCE_MAX"
#: prefill steps whose longest request has at most this many tokens take the token recurrence
TOKEN_RECURRENCE_DEFAULT = 128


def _cu_tensor(cu_seqlens: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``cu_seqlens`` (int64) on the device once per step, shared by every recurrent layer and by
    ``conv_prefill``: ``delta_rule_triton``'s cache (imported here, on CUDA, where Triton is)."""
    from hinge.layers.recurrent_kernels.delta_rule_triton import _layout_tensor

    return _layout_tensor(cu_seqlens, device)


@functools.lru_cache(maxsize=8)
def _chunk_indices(cu_seqlens: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """fla's varlen ``chunk_indices`` ((chunks, 2) int64: [request, chunk within it], chunks of
    ``FLA_CHUNK`` tokens) made on the host once per step and shared by every recurrent layer.
    Left to fla, they come from the CUDA ``cu_seqlens`` through a ``repeat_interleave`` whose
    size the host must read: one device sync per layer of every prefill."""
    rows = [(i, j) for i, (s, e) in enumerate(pairwise(cu_seqlens))
            for j in range(-(-(e - s) // FLA_CHUNK))]
    return to_device(rows, torch.int64, device).view(-1, 2)


def _import_fla():
    try:
        from fla.ops.gated_delta_rule import (
            chunk_gated_delta_rule,
            fused_recurrent_gated_delta_rule,
        )
    except ImportError as exc:  # pragma: no cover - depends on the GPU extra
        raise ImportError(
            "recurrent kernels 'fla' need fla-core (flash-linear-attention); install hinge's "
            "`gpu` extra on a CUDA machine, or use the 'torch' reference kernels"
        ) from exc
    return chunk_gated_delta_rule, fused_recurrent_gated_delta_rule


def _conv_prefill():
    """The one-kernel prefill conv (imported on first use; tests substitute it)."""
    from hinge.layers.recurrent_kernels.conv_prefill import conv_prefill

    return conv_prefill


def _fresh(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A new contiguous copy of ``x`` in ``dtype``: what fla's kernels get. A checkpoint-split
    prefill hands row slices that start anywhere (``run_split``), and Triton specializes on a
    pointer's 16-byte alignment: a view would compile a variant per alignment after the warm-up.
    (q, k and v are column slices of the conv output, copied anyway.)"""
    return x.to(dtype, copy=True, memory_format=torch.contiguous_format)


class FlaRecurrentKernels(TorchRecurrentKernels):
    name = "fla"

    def __init__(self) -> None:
        super().__init__(deterministic=False)
        self._chunk, self._recurrent = _import_fla()
        value = os.environ.get(TOKEN_RECURRENCE_ENV, str(TOKEN_RECURRENCE_DEFAULT))
        if not value.isdigit():
            raise ValueError(f"{TOKEN_RECURRENCE_ENV}={value!r}: give a token count (0 = fla's "
                             f"chunk pipeline for every prefill; default {TOKEN_RECURRENCE_DEFAULT})")
        #: prefill steps whose longest request is at most this long take the token recurrence
        self.token_recurrence_max = int(value)

    def warmup_prompt_lengths(self) -> tuple[int, ...]:
        """Two prompts past the short-prefill switch, so fla's chunk pipeline compiles at start-up
        too: one of an ordinary length and one a multiple of 16 (Triton's integer variants; the
        warm-up's own prompts cover the token recurrence's)."""
        n = self.token_recurrence_max
        if n == 0:
            return ()
        ordinary = n + 1 if (n + 1) % 16 else n + 2
        return (ordinary, -(-(n + 1) // 16) * 16)

    def runs_on(self, x: torch.Tensor) -> bool:
        return x.is_cuda

    def prefill_conv(self):
        """The default-mode one-kernel conv (``conv_prefill``): ``causal_conv1d`` routes to it."""
        return _conv_prefill()

    def decode_in_pool(self, q, k, v, g, beta, pool, read_slots, write_slots, prefix_lens):
        if not self.runs_on(q):
            return None
        from hinge.layers.recurrent_kernels.decode_in_pool import DEFAULT_MODE_TILE, decode_in_pool

        return decode_in_pool(q, k, v, g, beta, pool, read_slots, write_slots, prefix_lens,
                              tile=DEFAULT_MODE_TILE)

    def gated_delta_rule(self, q, k, v, g, beta, initial_state, cu_seqlens, *, track_states=False):
        if track_states or not self.runs_on(q):
            return super().gated_delta_rule(
                q, k, v, g, beta, initial_state, cu_seqlens, track_states=track_states
            )
        longest = max((e - s for s, e in pairwise(cu_seqlens)), default=0)
        if 1 < longest <= self.token_recurrence_max:  # a short prefill (module docstring)
            from hinge.layers.recurrent_kernels.delta_rule_triton import gated_delta_rule

            return DeltaRuleResult(*gated_delta_rule(q, k, v, g, beta, initial_state,
                                                     list(cu_seqlens), False))
        rep = v.shape[-2] // q.shape[-2]
        if rep > 1:  # expand q/k heads to the value heads (grouped value attention)
            q, k = q.repeat_interleave(rep, dim=-2), k.repeat_interleave(rep, dim=-2)
        state0 = initial_state.float().contiguous()
        b = len(cu_seqlens) - 1
        common = dict(
            scale=q.shape[-1] ** -0.5,
            initial_state=state0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
        if _uniform_len(cu_seqlens) == 1:  # decode: one row per request
            out, final = self._recurrent(
                _fresh(q, q.dtype).view(b, 1, *q.shape[1:]),
                _fresh(k, k.dtype).view(b, 1, *k.shape[1:]),
                _fresh(v, v.dtype).view(b, 1, *v.shape[1:]),
                g=_fresh(g, torch.float32).view(b, 1, -1),
                beta=_fresh(beta, q.dtype).view(b, 1, -1),
                **common,
            )
            return DeltaRuleResult(out.view(v.shape), final.float())
        if q.dtype == torch.float32:  # fla's chunk kernel takes bf16/fp16 only
            return super().gated_delta_rule(q, k, v, g, beta, initial_state, cu_seqlens)
        layout = tuple(cu_seqlens)
        out, final = self._chunk(
            _fresh(q, q.dtype)[None],
            _fresh(k, k.dtype)[None],
            _fresh(v, v.dtype)[None],
            g=_fresh(g, torch.float32)[None],
            beta=_fresh(beta, q.dtype)[None],
            cu_seqlens=_cu_tensor(layout, q.device),
            chunk_indices=_chunk_indices(layout, q.device),
            **common,
        )
        return DeltaRuleResult(out[0], final.float())
