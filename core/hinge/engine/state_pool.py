"""Recurrent-state pool of hybrid models: one slot per running request, beside the KV pool, and
a region of checkpoint slots (the prefix cache's states, with a budget of their own).

A slot holds, for every recurrent layer, its conv window (the last ``K - 1`` inputs, in the model
dtype: the inputs themselves, so storing them loses nothing) and, for gated-DeltaNet layers, the
delta-rule matrix state (in ``state_dtype``, float32 by default). Unlike KV, a state cannot be cut
back to an earlier position: it is overwritten in place by every step, so keeping an earlier one
means copying it (``copy_slot``) or writing a per-position state (``PositionStates.write``).

Slot 0 is reserved (a dummy slot padded graph rows may point at); usable slots are
``1..num_slots-1``, handed out lowest first and zeroed on allocation (a fresh request). Checkpoint
slots follow: ``num_slots..num_slots+num_checkpoint_slots-1``, handed out by ``checkpoints`` (a
``SlotAllocator``) to the scheduler for a running request's checkpoint and to the prefix cache,
which keeps them in its tree and frees them when it evicts their state.

Receipts: every state write also writes the step's stamp into ``stamps[layer, slot]`` (the same
``write`` call, eager or inside a CUDA graph). ``receipt(slots, stamp)`` compares the stamps of a
step's checkpoint slots with the step's own on the device and brings the answer to the host
without waiting (``CheckpointReceipt``): a slot enters the prefix cache only when every recurrent
layer stamped it, so a path that skipped the write cannot hand the cache a slot nobody wrote.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from hinge.devices import to_device
from hinge.forward import PositionStates, RecurrentLayerSpec

logger = logging.getLogger(__name__)

__all__ = ["CheckpointReceipt", "PositionStates", "RecurrentLayerSpec", "SlotAllocator", "StateMoves",
           "StatePool"]


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class SlotAllocator:
    """Hands out the slots of one region of the pool, lowest first; each slot once."""

    def __init__(self, first: int, count: int, what: str = "checkpoint slot") -> None:
        self.first, self.num_total, self.what = first, count, what
        self._free = list(range(first + count - 1, first - 1, -1))  # pop(): lowest id first
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def owns(self, slot: int) -> bool:
        return self.first <= slot < self.first + self.num_total

    def allocate(self) -> int | None:
        """A free slot, or None when the region is full (the caller evicts or goes without)."""
        if not self._free:
            return None
        slot = self._free.pop()
        self._used.add(slot)
        return slot

    def free(self, slot: int) -> None:
        assert slot in self._used, f"{self.what} {slot} freed but not allocated (double free?)"
        self._used.remove(slot)
        self._free.append(slot)


class StatePool:
    def __init__(self, layers: list[RecurrentLayerSpec], num_slots: int, *,
                 conv_dtype: torch.dtype, ssm_dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", num_checkpoint_slots: int = 0):
        assert num_slots >= 2, f"a state pool needs at least 2 slots (one is reserved), got {num_slots}"
        assert [spec.state_id for spec in layers] == list(range(len(layers))), "state ids must be 0..n-1"
        self.layers = layers
        self.num_slots = num_slots  #: working slots, the reserved slot 0 included
        self.num_checkpoint_slots = num_checkpoint_slots
        total = num_slots + num_checkpoint_slots
        self.conv_dtype, self.ssm_dtype = conv_dtype, ssm_dtype
        self.conv = [torch.zeros(total, s.conv_dim, s.conv_kernel - 1, dtype=conv_dtype, device=device)
                     for s in layers]
        self.ssm = [torch.zeros(total, *s.ssm_shape, dtype=ssm_dtype, device=device)
                    if s.ssm_shape else None for s in layers]
        #: stamp of the step that last wrote each (layer, slot): the receipts' evidence
        self.stamps = torch.zeros(len(layers), total, dtype=torch.int64, device=device)
        #: the working region (one slot per running request; slot 0 is reserved)
        self.working = SlotAllocator(1, num_slots - 1, what="state slot")
        #: the checkpoint region (prefix-cache states)
        self.checkpoints = SlotAllocator(num_slots, num_checkpoint_slots)
        self._receipt_ring: list[torch.Tensor] = [torch.empty(0, dtype=torch.bool)] * 3
        self._receipt_turn = 0

    # sizing
    @staticmethod
    def bytes_per_slot(layers: list[RecurrentLayerSpec], conv_dtype: torch.dtype,
                       ssm_dtype: torch.dtype = torch.float32) -> int:
        conv = sum(s.conv_dim * (s.conv_kernel - 1) for s in layers) * _itemsize(conv_dtype)
        ssm = sum(_numel(s.ssm_shape) for s in layers if s.ssm_shape) * _itemsize(ssm_dtype)
        return conv + ssm

    @property
    def nbytes(self) -> int:
        total = self.num_slots + self.num_checkpoint_slots
        return total * self.bytes_per_slot(self.layers, self.conv_dtype, self.ssm_dtype)

    @classmethod
    def create(cls, layers: list[RecurrentLayerSpec], *, max_requests: int, conv_dtype: torch.dtype,
               ssm_dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
               num_checkpoint_slots: int = 0) -> StatePool:
        """One slot per request that may run at once, plus the reserved slot, plus the checkpoint
        slots of the prefix cache; logs the sizes."""
        pool = cls(layers, max_requests + 1, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype, device=device,
                   num_checkpoint_slots=num_checkpoint_slots)
        per_slot = cls.bytes_per_slot(layers, conv_dtype, ssm_dtype)
        logger.info("state pool: %d slots + %d checkpoint slots, x %.3f MiB = %.2f MiB "
                    "(%d recurrent layers, ssm %s)", max_requests, num_checkpoint_slots,
                    per_slot / 2**20, pool.nbytes / 2**20, len(layers), ssm_dtype)
        return pool

    # working slots (one per running request)
    @property
    def num_free(self) -> int:
        return self.working.num_free

    @property
    def num_used(self) -> int:
        return self.working.num_used

    def can_allocate(self, n: int = 1) -> bool:
        return n <= self.working.num_free

    def allocate(self, *, zero: bool = True) -> int:
        """A slot for a fresh request, zeroed now; ``zero=False`` leaves the zeroing to a
        ``StateMoves`` plan that the runner executes with the step (the scheduler's way)."""
        slot = self.working.allocate()
        assert slot is not None, f"no free state slot ({self.num_used} of {self.num_slots - 1} used)"
        if zero:
            self.clear(slot)
        return slot

    def free(self, slot: int) -> None:
        self.working.free(slot)

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
    def read(self, state_id: int, slots: torch.Tensor, fresh: torch.Tensor | None = None, *,
             conv: bool = True, ssm: bool = True):
        """Initial (conv, ssm) of the step's requests (copies); rows with ``fresh`` start from
        zeros. ``conv=False`` / ``ssm=False`` skip one (None in its place): a kernel that reads
        the pool in place needs no copy of the matrix states."""
        # NOTE: index_select / index_copy_, not advanced indexing: on CPU the latter is ~2x slower
        want_conv, want_ssm = conv, ssm
        conv = self.conv[state_id].index_select(0, slots) if want_conv else None
        ssm = (self.ssm[state_id].index_select(0, slots)
               if want_ssm and self.ssm[state_id] is not None else None)
        if fresh is not None:
            if conv is not None:
                conv = conv.masked_fill(fresh[:, None, None], 0)
            if ssm is not None:
                ssm = ssm.masked_fill(fresh.view(-1, *[1] * (ssm.dim() - 1)), 0)
        return conv, ssm

    def write(self, state_id: int, slots: torch.Tensor, conv: torch.Tensor | None,
              ssm: torch.Tensor | None = None, stamps: torch.Tensor | None = None) -> None:
        """The one write path of recurrent state: a step's final states, a checkpoint inside it,
        eager or replayed from a CUDA graph. ``stamps`` (the step's, ``ForwardBatch.state_stamps``)
        are written beside the state: the receipt ``receipt`` reads back. ``conv`` / ``ssm`` None:
        a kernel already wrote that state in place at ``slots`` (``RecurrentKernels.conv_in_pool``,
        ``decode_in_pool``); the stamps are still written here."""
        if conv is not None:
            self.conv[state_id].index_copy_(0, slots, conv.to(self.conv_dtype))
        if ssm is not None:
            self.ssm[state_id].index_copy_(0, slots, ssm.to(self.ssm_dtype))
        if stamps is not None:
            self.stamps[state_id].index_copy_(0, slots, stamps)

    def receipt(self, slots: list[int], stamp: int) -> CheckpointReceipt:
        """Which of ``slots`` every recurrent layer stamped with ``stamp`` (call after the step
        was launched; nothing waits for the device until ``CheckpointReceipt.written``)."""
        idx = to_device(slots, torch.int64, self.stamps.device)
        ok = (self.stamps.index_select(1, idx) == stamp).all(0)
        host = None
        if ok.is_cuda:  # NOTE: a ring of pinned buffers: pinning memory per step costs milliseconds
            if len(slots) > self._receipt_ring[0].numel():
                self._receipt_ring = [torch.empty(2 * len(slots), dtype=torch.bool, pin_memory=True)
                                      for _ in range(3)]
            self._receipt_turn = (self._receipt_turn + 1) % 3
            host = self._receipt_ring[self._receipt_turn][:len(slots)]
        return CheckpointReceipt.send(list(slots), ok, host)


class CheckpointReceipt:
    """The answer of ``StatePool.receipt`` on its way to the host (one small non-blocking copy;
    on CUDA an event marks when it landed)."""

    def __init__(self, slots: list[int], host: torch.Tensor, event: Any = None) -> None:
        self.slots, self._host, self._event = slots, host, event

    @classmethod
    def send(cls, slots: list[int], ok: torch.Tensor, host: torch.Tensor | None = None) -> CheckpointReceipt:
        """``ok`` to the host: as is on CPU; on CUDA a non-blocking copy into ``host`` (pinned;
        read before the ring that owns it comes round again: a receipt is read one step later)."""
        if ok.device.type == "cpu":
            return cls(slots, ok)
        host = torch.empty(ok.shape, dtype=ok.dtype, pin_memory=True) if host is None else host
        host.copy_(ok, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return cls(slots, host, event)

    def written(self) -> list[bool]:
        """Per slot, in order: whether every recurrent layer wrote it in the step (waits)."""
        if self._event is not None:
            self._event.synchronize()
        return [bool(x) for x in self._host.tolist()]


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
