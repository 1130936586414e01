"""The floor every part stands on: what one forward step carries, and the pool views it reads.

The engine builds a ``ForwardBatch`` (``hinge.batching.ForwardBatchBuilder``), models and their
layers read it through a ``ForwardContext``, and return a ``ForwardOutput``. Attention backends
see the KV pool as a ``KVCache`` (storage only; who owns which page is the engine's business),
recurrent layers see the state pool through ``RecurrentStates``. This module imports nothing of
hinge: the engine, models, layers, built-ins, the testing kit and plugins all import it, and
``hinge.contracts`` re-exports it.

Interval map of one step with three requests (``|`` marks request boundaries)::

    tokens      [ r0: extend_lens[0] | r1: extend_lens[1] | r2: extend_lens[2] ]   T rows
    cu_extend   0                     e0                    e0+e1               T
    kv of r_i   [ prefix_lens[i] cached tokens ][ extend_lens[i] new tokens ]   = seq_lens[i]

Every new token is written into the KV pool at ``out_loc`` (a flat slot: ``page * page_size +
offset``); request ``i`` reads its keys through ``page_table[i, :ceil(seq_lens[i] / page_size)]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

if TYPE_CHECKING:
    from hinge.contracts import AttentionBackend

Phase = Literal["prefill", "decode", "mixed", "verify"]


# ---------------------------------------------------------------------------------------------
# pools, as the model sees them
# ---------------------------------------------------------------------------------------------


@dataclass
class KVCache:
    """Paged K/V storage: one K and one V tensor per attention layer, addressed by flat slot.

    Slot ``page * page_size + offset`` holds one token's keys/values for its layer. Page 0 is
    reserved: padded rows of a captured graph point at it, so its contents are garbage (tests
    fill it with NaN) and a backend must never let it reach a live row's output.
    """

    k: list[torch.Tensor]  #: per attention layer: (num_pages * page_size, num_kv_heads, head_dim)
    v: list[torch.Tensor]  #: same shape and dtype as ``k``
    page_size: int

    @property
    def num_pages(self) -> int:
        return self.k[0].shape[0] // self.page_size if self.k else 0

    @property
    def num_usable_tokens(self) -> int:
        return (self.num_pages - 1) * self.page_size

    def slot(self, pages: list[int], position: int) -> int:
        """Flat slot of token ``position`` of a request holding ``pages``."""
        return pages[position // self.page_size] * self.page_size + position % self.page_size

    def pages_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)


@dataclass(frozen=True)
class RecurrentLayerSpec:
    """Static description of one recurrent layer (gated DeltaNet, short conv), fixed at build."""

    layer_id: int  #: decoder layer index (HF numbering)
    state_id: int  #: index into the pool (recurrent layers only, numbered densely)
    conv_dim: int  #: channels of the conv window
    conv_kernel: int  #: K taps; the window keeps K - 1 inputs
    ssm_shape: tuple[int, ...] = ()  #: delta-rule state (Hv, Dk, Dv); () for a conv-only layer


class RecurrentStates(Protocol):
    """The recurrent-state pool as layers see it (``hinge.engine.state_pool.StatePool``).

    Per state id: ``conv[state_id]`` is (num_slots, conv_dim, conv_kernel - 1) in ``conv_dtype``,
    ``ssm[state_id]`` is (num_slots, *ssm_shape) in ``ssm_dtype`` or None for conv-only layers.
    Slot 0 is reserved for padded rows.
    """

    conv: list[torch.Tensor]
    ssm: list[torch.Tensor | None]
    conv_dtype: torch.dtype
    ssm_dtype: torch.dtype
    #: (num_layers, num_slots) int64: the stamp of the step that last wrote each layer's slot
    stamps: torch.Tensor

    def read(self, state_id: int, slots: torch.Tensor, fresh: torch.Tensor | None = None):
        """Initial (conv, ssm) of the step's requests; rows with ``fresh`` start from zeros."""

    def write(self, state_id: int, slots: torch.Tensor, conv: torch.Tensor,
              ssm: torch.Tensor | None = None, stamps: torch.Tensor | None = None) -> None:
        """Store a state per request (rows of ``slots``), and ``stamps`` beside it: the step's
        receipt (``ForwardBatch.state_stamps``), which the engine reads back to learn which
        checkpoint slots were really written. The one write path of recurrent state."""


@dataclass
class PositionStates:
    """Recurrent state after every token row of a step (``ForwardBatch.track_states``).

    Row ``cu_extend[i] + j`` holds request ``i``'s state after its ``j + 1``-th new token, for
    every recurrent layer. ``write(pool, row, slot)`` keeps that state: a verify step that accepted
    ``a`` drafts of request ``i`` keeps row ``cu_extend[i] + a``.
    """

    cu_extend: list[int]
    conv: list[torch.Tensor | None] = field(default_factory=list)  #: per state id: (T, C, K-1)
    ssm: list[torch.Tensor | None] = field(default_factory=list)  #: per state id: (T, Hv, Dk, Dv)

    @classmethod
    def empty(cls, cu_extend: list[int], num_layers: int) -> PositionStates:
        return cls(list(cu_extend), [None] * num_layers, [None] * num_layers)

    def row(self, request: int, num_tokens: int) -> int:
        """Row of the state after the first ``num_tokens`` new tokens of ``request``."""
        start, end = self.cu_extend[request], self.cu_extend[request + 1]
        assert 1 <= num_tokens <= end - start, f"request {request} ran {end - start} tokens, asked {num_tokens}"
        return start + num_tokens - 1

    def write(self, pool: RecurrentStates, row: int, slot: int, stamp: int | None = None) -> None:
        """Keep the state of ``row`` in ``slot`` through the pool's one write path (with the
        step's ``stamp``, when a receipt is to confirm it: a checkpoint a verify step keeps)."""
        # NOTE: torch.full, not torch.tensor: a fill kernel, no host copy that waits for the device
        slots = torch.full((1,), slot, dtype=torch.int64, device=pool.conv[0].device) if pool.conv else None
        stamps = None if stamp is None else torch.full_like(slots, stamp)
        for state_id, (conv, ssm) in enumerate(zip(self.conv, self.ssm, strict=True)):
            assert conv is not None, f"recurrent layer {state_id} recorded no per-position state"
            pool.write(state_id, slots, conv[row:row + 1], None if ssm is None else ssm[row:row + 1],
                       stamps)


# ---------------------------------------------------------------------------------------------
# one step
# ---------------------------------------------------------------------------------------------


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
    state_slots: torch.Tensor | None = None  #: (B,) int64, recurrent-state slot each request reads
    #: (B,) int64, slot the state after the step is written to; None = ``state_slots``. A slot
    #: other than the one read is how a checkpoint at the end of a step is kept (no copy).
    state_write_slots: torch.Tensor | None = None
    #: (B,) int64, slot receiving request ``i``'s state after its first ``checkpoint_lens_cpu[i]``
    #: new tokens, for a checkpoint inside the step (0 = none: slot 0 is reserved); None = none.
    checkpoint_slots: torch.Tensor | None = None
    #: (B,) int64, the step's stamp, written by every state write beside the state (the receipt)
    state_stamps: torch.Tensor | None = None
    #: (B,) int64, each request's row in the builder's device tables (page table, last tokens)
    rows: torch.Tensor | None = None
    #: hybrid models: also return the recurrent state after every position of each request
    #: (the shape a speculator's verify needs); see ``ForwardOutput.position_states``.
    track_states: bool = False
    #: hidden states to return, numbered as HF ``output_hidden_states`` (0 = embeddings).
    capture_hidden_layers: tuple[int, ...] = ()
    #: host copies (python ints) so kernels and loops need no device sync.
    extend_lens_cpu: list[int] = field(default_factory=list)
    prefix_lens_cpu: list[int] = field(default_factory=list)
    #: per request: keep the state after this many new tokens in ``checkpoint_slots`` (0 = none;
    #: a checkpoint at the step's end goes through ``state_write_slots`` instead)
    checkpoint_lens_cpu: list[int] = field(default_factory=list)
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
    #: recurrent-state pool of hybrid models, or None.
    states: RecurrentStates | None = None
    #: filled by the model: hidden states by HF index, per-position recurrent states.
    hidden_states: dict[int, torch.Tensor] = field(default_factory=dict)
    position_states: PositionStates | None = None


@dataclass
class ForwardOutput:
    logits: torch.Tensor  #: (N, vocab) float32, rows of ``batch.logits_indices``
    hidden_states: dict[int, torch.Tensor] = field(default_factory=dict)  #: (T, hidden) each
    position_states: PositionStates | None = None
