"""The one way recurrent layers keep states: a step's final states and its checkpoints.

Every recurrent layer (gated DeltaNet, short conv; torch, fla and deterministic kernels) writes
states through ``write_step_states`` only, eager or replayed from a CUDA graph:

- the state after the whole step goes to ``step_write_slots(batch)`` (the slot each request reads,
  unless the step ends on a checkpoint: then the final state lands in the checkpoint slot and the
  request reads it from there next step; no copy);
- a checkpoint inside the step (request ``i`` keeps its state after ``checkpoint_lens_cpu[i]`` of
  its new tokens in ``checkpoint_slots[i]``) runs the kernels in two parts: every request up to its
  checkpoint (the others whole), then the rest of the cut requests from the state the first part
  ended with. Kernels carry the state from token to token, so the final state and every output row
  are those of one run (bit for bit with the deterministic kernels);
- every write stamps the slot with the step's stamp (``batch.state_stamps``): the receipt the
  engine reads back before a checkpoint may enter the prefix cache;
- a decode step (``decodes_in_pool``: one token per request, no checkpoint inside, no
  per-position states) whose kernels have an in-place path (``RecurrentKernels.decode_in_pool``)
  has the matrix state read from and written to the pool by the kernel itself, at the same
  ``step_write_slots``, and likewise the conv window (``RecurrentKernels.conv_in_pool``, on
  CUDA); ``write_step_states`` then writes what is left and the stamps (its ``ssm`` /
  ``conv`` None). Eager and replayed decode steps take the same path: the choice is made on the
  host from the step's shape, never from its values.

Graph replays only ever carry checkpoints at the step's end (``GraphRunner.find`` runs a step
with a checkpoint inside it eager): the split's layout is built on the host.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hinge.devices import to_device

if TYPE_CHECKING:
    from hinge.forward import ForwardBatch, ForwardContext

#: ``run(rows, states, cu_seqlens) -> (row outputs, final states)``: one kernel call over a flat
#: batch; row outputs are (T, ...) tensors or None, final states are (B, ...) tensors.
KernelRun = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor], list[int]],
                     tuple[tuple[torch.Tensor | None, ...], tuple[torch.Tensor, ...]]]


@dataclass(frozen=True)
class CheckpointSplit:
    """A step cut at its checkpoints: part 1 = every request up to its checkpoint (uncut requests
    whole), part 2 = the rest of the cut requests."""

    rows1: torch.Tensor  #: token rows of part 1, in order
    rows2: torch.Tensor  #: token rows of part 2, in order
    cu1: list[int]
    cu2: list[int]
    tails: torch.Tensor  #: requests that have a part 2 (indices into the step's requests)


def checkpoint_split(batch: ForwardBatch) -> CheckpointSplit | None:
    """The split of ``batch`` at its checkpoints inside the step; None when it has none."""
    lens = batch.checkpoint_lens_cpu
    if not any(lens):
        return None
    return _split(tuple(batch.cu_extend_cpu), tuple(lens), batch.input_ids.device)


@functools.lru_cache(maxsize=16)
def _split(cu: tuple[int, ...], lens: tuple[int, ...], device: torch.device) -> CheckpointSplit:
    rows1: list[int] = []
    rows2: list[int] = []
    cu1, cu2, tails = [0], [0], []
    for i, n in enumerate(lens):
        start, end = cu[i], cu[i + 1]
        cut = start + n if 0 < n < end - start else end
        rows1.extend(range(start, cut))
        cu1.append(len(rows1))
        if cut < end:
            rows2.extend(range(cut, end))
            cu2.append(len(rows2))
            tails.append(i)
    to = functools.partial(to_device, dtype=torch.int64, device=device)
    return CheckpointSplit(to(rows1), to(rows2), cu1, cu2, to(tails))


def run_split(run: KernelRun, rows: Sequence[torch.Tensor], states: Sequence[torch.Tensor],
              batch: ForwardBatch):
    """``run`` over the step, cut at its checkpoints when it has any.

    :returns: (row outputs, final states, checkpoint states or None): checkpoint state ``i`` is
        request ``i``'s state after ``checkpoint_lens_cpu[i]`` new tokens (rows without a
        checkpoint hold their final state; they write the reserved slot 0).
    """
    split = checkpoint_split(batch)
    if split is None:
        outs, finals = run(rows, states, batch.cu_extend_cpu)
        return outs, finals, None
    outs1, fin1 = run([x.index_select(0, split.rows1) for x in rows], states, split.cu1)
    outs2, fin2 = run([x.index_select(0, split.rows2) for x in rows],
                      [f.index_select(0, split.tails) for f in fin1], split.cu2)
    outs = tuple(None if a is None else _scatter(a, b, split) for a, b in zip(outs1, outs2, strict=True))
    finals = tuple(f1.index_copy(0, split.tails, f2.to(f1.dtype)) for f1, f2 in zip(fin1, fin2, strict=True))
    return outs, finals, fin1


def _scatter(a: torch.Tensor, b: torch.Tensor, split: CheckpointSplit) -> torch.Tensor:
    out = a.new_empty((a.shape[0] + b.shape[0], *a.shape[1:]))
    out.index_copy_(0, split.rows1, a)
    out.index_copy_(0, split.rows2, b.to(a.dtype))
    return out


def step_write_slots(batch: ForwardBatch) -> torch.Tensor:
    """The slots the state after the step goes to, one per request."""
    return batch.state_write_slots if batch.state_write_slots is not None else batch.state_slots


#: ``HINGE_DECODE_IN_POOL=0`` sends decode steps back through gather, kernel and scatter (the
#: in-pool kernel is new and was not yet run on a GPU when it became the default: 2026-12-01)
IN_POOL_ENV = "HINGE_DECODE_IN_POOL"


def decodes_in_pool(batch: ForwardBatch) -> bool:
    """Whether the step may run its delta rule in the pool (``RecurrentKernels.decode_in_pool``):
    one token per request, no checkpoint inside the step, no per-position states, and not turned
    off by ``HINGE_DECODE_IN_POOL=0``. Host lists only."""
    return (os.environ.get(IN_POOL_ENV, "1") != "0" and not batch.track_states
            and not any(batch.checkpoint_lens_cpu) and all(n == 1 for n in batch.extend_lens_cpu))


def write_step_states(ctx: ForwardContext, state_id: int, conv: torch.Tensor | None,
                      ssm: torch.Tensor | None, checkpoint: tuple[torch.Tensor, torch.Tensor | None]
                      | None) -> None:
    """Write one layer's states after the step (and its checkpoints inside the step) with the
    step's stamps. The only place a recurrent layer writes the state pool, but for the states
    of a decode step its kernels ran in the pool (``conv`` / ``ssm`` None: already written at
    ``step_write_slots``; ``ssm`` None also for a layer without a matrix state)."""
    batch = ctx.batch
    ctx.states.write(state_id, step_write_slots(batch), conv, ssm, batch.state_stamps)
    if checkpoint is not None:
        assert batch.checkpoint_slots is not None, "checkpoint lengths without checkpoint slots"
        ctx.states.write(state_id, batch.checkpoint_slots, checkpoint[0], checkpoint[1],
                         batch.state_stamps)
