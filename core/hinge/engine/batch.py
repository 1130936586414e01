"""The flattened batch one forward step runs on, and the per-step context a model reads.

Interval map of one step with three requests (``|`` marks request boundaries)::

    tokens      [ r0: extend_lens[0] | r1: extend_lens[1] | r2: extend_lens[2] ]   T rows
    cu_extend   0                     e0                    e0+e1               T
    kv of r_i   [ prefix_lens[i] cached tokens ][ extend_lens[i] new tokens ]   = seq_lens[i]

Every new token is written into the KV pool at ``out_loc`` (a flat slot: ``page * page_size +
offset``); request ``i`` reads its keys through ``page_table[i, :ceil(seq_lens[i] / page_size)]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from hinge.contracts import AttentionBackend
    from hinge.engine.kv_pool import KVCache

Phase = Literal["prefill", "decode", "mixed", "verify"]


@dataclass
class ForwardBatch:
    """What the runner hands the model for one step. Tensors live on the model's device."""

    phase: Phase
    input_ids: torch.Tensor  #: (T,) int64, all requests' new tokens concatenated
    positions: torch.Tensor  #: (T,) int64, absolute position of each new token
    extend_lens: torch.Tensor  #: (B,) int64, new tokens per request this step
    prefix_lens: torch.Tensor  #: (B,) int64, tokens already in the KV pool per request
    page_table: torch.Tensor  #: (B, max_pages) int64, page ids per request (unused entries 0)
    out_loc: torch.Tensor  #: (T,) int64, flat KV slot each new token is written to
    logits_indices: torch.Tensor  #: (N,) int64, rows of T whose logits are computed
    state_slots: torch.Tensor | None = None  #: (B,) int64, recurrent-state slot per request
    #: hybrid models: also return the recurrent state after every position of each request
    #: (the shape a speculator's verify needs); see ``ForwardOutput.position_states``.
    track_states: bool = False
    #: hidden states to return, numbered as HF ``output_hidden_states`` (0 = embeddings).
    capture_hidden_layers: tuple[int, ...] = ()
    #: host copies (python ints) so kernels and loops need no device sync.
    extend_lens_cpu: list[int] = field(default_factory=list)
    prefix_lens_cpu: list[int] = field(default_factory=list)
    #: filled by the attention backend's ``prepare_metadata`` once per step.
    attn_metadata: Any = None

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def seq_lens_cpu(self) -> list[int]:
        return [p + e for p, e in zip(self.prefix_lens_cpu, self.extend_lens_cpu, strict=True)]

    @property
    def seq_lens(self) -> torch.Tensor:
        return self.prefix_lens + self.extend_lens

    @property
    def cu_extend_cpu(self) -> list[int]:
        out = [0]
        for e in self.extend_lens_cpu:
            out.append(out[-1] + e)
        return out


@dataclass
class ForwardContext:
    """Everything a model's layers read besides weights, scoped to one step (never a global)."""

    batch: ForwardBatch
    attn: AttentionBackend
    kv: KVCache
    #: recurrent-state pool of hybrid models (``hinge.engine.state_pool.StatePool``) or None.
    states: Any = None
    #: filled by the model: hidden states by HF index, per-position recurrent states.
    hidden_states: dict[int, torch.Tensor] = field(default_factory=dict)
    position_states: Any = None


@dataclass
class ForwardOutput:
    logits: torch.Tensor  #: (N, vocab) float32, rows of ``batch.logits_indices``
    hidden_states: dict[int, torch.Tensor] = field(default_factory=dict)  #: (T, hidden) each
    position_states: Any = None
