"""Recurrent-state pool of hybrid models: one slot per running request, beside the KV pool.

A slot holds, for every recurrent layer, its conv window (the last ``K - 1`` inputs, in the model
dtype: the inputs themselves, so storing them loses nothing) and, for gated-DeltaNet layers, the
delta-rule matrix state (in ``state_dtype``, float32 by default). Unlike KV, a state cannot be cut
back to an earlier position: it is overwritten in place by every step, so keeping an earlier one
means copying it (``copy_slot``) or writing a per-position state (``PositionStates.write``).

Slot 0 is reserved (a dummy slot padded graph rows may point at); usable slots are
``1..num_slots-1``, handed out lowest first and zeroed on allocation (a fresh request).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from hinge.devices import to_device
from hinge.forward import PositionStates, RecurrentLayerSpec

logger = logging.getLogger(__name__)

__all__ = ["PositionStates", "RecurrentLayerSpec", "StateMoves", "StatePool"]


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class StatePool:
    def __init__(self, layers: list[RecurrentLayerSpec], num_slots: int, *,
                 conv_dtype: torch.dtype, ssm_dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        assert num_slots >= 2, f"a state pool needs at least 2 slots (one is reserved), got {num_slots}"
        assert [spec.state_id for spec in layers] == list(range(len(layers))), "state ids must be 0..n-1"
        self.layers = layers
        self.num_slots = num_slots
        self.conv_dtype, self.ssm_dtype = conv_dtype, ssm_dtype
        self.conv = [torch.zeros(num_slots, s.conv_dim, s.conv_kernel - 1, dtype=conv_dtype, device=device)
                     for s in layers]
        self.ssm = [torch.zeros(num_slots, *s.ssm_shape, dtype=ssm_dtype, device=device)
                    if s.ssm_shape else None for s in layers]
        self._free = list(range(num_slots - 1, 0, -1))  # pop() from the end: lowest id first
        self._used: set[int] = set()

    # sizing
    @staticmethod
    def bytes_per_slot(layers: list[RecurrentLayerSpec], conv_dtype: torch.dtype,
                       ssm_dtype: torch.dtype = torch.float32) -> int:
        conv = sum(s.conv_dim * (s.conv_kernel - 1) for s in layers) * _itemsize(conv_dtype)
        ssm = sum(_numel(s.ssm_shape) for s in layers if s.ssm_shape) * _itemsize(ssm_dtype)
        return conv + ssm

    @property
    def nbytes(self) -> int:
        return self.num_slots * self.bytes_per_slot(self.layers, self.conv_dtype, self.ssm_dtype)

    @classmethod
    def create(cls, layers: list[RecurrentLayerSpec], *, max_requests: int, conv_dtype: torch.dtype,
               ssm_dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> StatePool:
        """One slot per request that may run at once, plus the reserved slot; logs the size."""
        pool = cls(layers, max_requests + 1, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype, device=device)
        per_slot = cls.bytes_per_slot(layers, conv_dtype, ssm_dtype)
        logger.info("state pool: %d slots x %.3f MiB = %.2f MiB (%d recurrent layers, ssm %s)",
                    max_requests, per_slot / 2**20, pool.nbytes / 2**20, len(layers), ssm_dtype)
        return pool

    # slots
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def can_allocate(self, n: int = 1) -> bool:
        return n <= len(self._free)

    def allocate(self, *, zero: bool = True) -> int:
        """A slot for a fresh request, zeroed now; ``zero=False`` leaves the zeroing to a
        ``StateMoves`` plan that the runner executes with the step (the scheduler's way)."""
        assert self._free, f"no free state slot ({self.num_used} of {self.num_slots - 1} used)"
        slot = self._free.pop()
        self._used.add(slot)
        if zero:
            self.clear(slot)
        return slot

    def free(self, slot: int) -> None:
        assert slot in self._used, f"state slot {slot} freed but not allocated (double free?)"
        self._used.remove(slot)
        self._free.append(slot)

    def clear(self, slot: int) -> None:
        for conv, ssm in zip(self.conv, self.ssm, strict=True):
            conv[slot].zero_()
            if ssm is not None:
                ssm[slot].zero_()

    def copy_slot(self, src: int, dst: int) -> None:
        """Copy every layer's state of ``src`` into ``dst`` (a checkpoint or a restore)."""
        for conv, ssm in zip(self.conv, self.ssm, strict=True):
            conv[dst].copy_(conv[src])
            if ssm is not None:
                ssm[dst].copy_(ssm[src])

    def apply(self, moves: StateMoves) -> None:
        """Execute a step's planned moves: zero slots, then copy slots (one op per tensor each)."""
        device = self.conv[0].device if self.conv else None
        if moves.zero:
            idx = to_device(moves.zero, torch.int64, device)
            for t in (*self.conv, *self.ssm):
                if t is not None:
                    t.index_fill_(0, idx, 0)
        if moves.copy:
            src = to_device([s for s, _ in moves.copy], torch.int64, device)
            dst = to_device([d for _, d in moves.copy], torch.int64, device)
            for t in (*self.conv, *self.ssm):
                if t is not None:
                    t.index_copy_(0, dst, t.index_select(0, src))

    # per-step access (layers)
    def read(self, state_id: int, slots: torch.Tensor, fresh: torch.Tensor | None = None):
        """Initial (conv, ssm) of the step's requests; rows with ``fresh`` start from zeros."""
        # NOTE: index_select / index_copy_, not advanced indexing: on CPU the latter is ~2x slower
        conv = self.conv[state_id].index_select(0, slots)
        ssm = self.ssm[state_id].index_select(0, slots) if self.ssm[state_id] is not None else None
        if fresh is not None:
            conv = conv.masked_fill(fresh[:, None, None], 0)
            if ssm is not None:
                ssm = ssm.masked_fill(fresh.view(-1, *[1] * (ssm.dim() - 1)), 0)
        return conv, ssm

    def write(self, state_id: int, slots: torch.Tensor, conv: torch.Tensor,
              ssm: torch.Tensor | None = None) -> None:
        self.conv[state_id].index_copy_(0, slots, conv.to(self.conv_dtype))
        if ssm is not None:
            self.ssm[state_id].index_copy_(0, slots, ssm.to(self.ssm_dtype))


@dataclass
class StateMoves:
    """State-slot work the scheduler plans for a step and the runner executes before it runs:
    zero the slots of fresh requests, copy checkpoints into the slots of requests that resume."""

    zero: list[int] = field(default_factory=list)
    copy: list[tuple[int, int]] = field(default_factory=list)  #: (source slot, destination slot)

    def __bool__(self) -> bool:
        return bool(self.zero or self.copy)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
