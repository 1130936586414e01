"""What a captured CUDA graph's step looks like: its shape, its fixed tensors, the padding rule.

A graph reads fixed tensors by address, so a live step is written into the tensors of a captured
shape (``hinge.batching.ForwardBatchBuilder.static_batch`` / ``build(..., into=...)``) and padded
up to it. Padded rows are requests over the reserved page 0 and state slot 0 (invariant 4);
``pad_extend_lens`` is the one rule for how many tokens each padded row gets, shared by the
builder, the graph runner and every graph-capable attention backend. Stands on ``hinge.forward``
only (the floor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hinge.forward import ForwardBatch, Phase


@dataclass(frozen=True)
class GraphShape:
    """The step shape of one captured CUDA graph; a live step that fits is padded up to it.

    - decode-shaped (``tokens_per_request = q``): ``num_requests`` R requests of q tokens each,
      ``num_tokens = R q``, a logit row per token (``num_logits = R q``);
    - prefill-shaped (``tokens_per_request = None``): any B <= R - 1 requests with T <= N tokens in
      all (row R - 1 is always left for padding), one logit row per live request (L = R - 1).
    """

    num_requests: int
    num_tokens: int
    num_logits: int
    tokens_per_request: int | None = None

    @classmethod
    def decode(cls, batch_size: int, tokens_per_request: int = 1) -> GraphShape:
        n = batch_size * tokens_per_request
        return cls(batch_size, n, n, tokens_per_request)

    @classmethod
    def prefill(cls, num_tokens: int, max_requests: int) -> GraphShape:
        return cls(max_requests + 1, num_tokens, max_requests, None)

    @property
    def phase(self) -> Phase:
        """The phase of the all-padding batch captured for this shape."""
        if self.tokens_per_request is None:
            return "prefill"
        return "decode" if self.tokens_per_request == 1 else "verify"


def pad_extend_lens(live: Sequence[int], num_tokens: int, num_rows: int) -> list[int]:
    """Token counts of all ``num_rows`` rows of a padded step: the live rows, then the
    ``num_tokens - sum(live)`` padded tokens spread over the padded rows in order, as evenly as
    possible (earlier rows take the remainder). The runner and every graph-capable backend use
    this one rule (``hinge.contracts.AttentionBackend``, "Padded rows")."""
    rows, extra = num_rows - len(live), num_tokens - sum(live)
    assert rows >= 0 and extra >= 0 and (rows or not extra), (
        f"{len(live)} requests of {sum(live)} tokens do not fit {num_rows} rows of {num_tokens} tokens")
    base, rem = divmod(extra, rows) if rows else (0, 0)
    return [*live, *[base + 1] * rem, *[base] * (rows - rem)]


@dataclass
class StaticBatch:
    """The fixed tensors of one captured shape (``ForwardBatchBuilder.static_batch``).

    ``flat`` holds, in the builder's staging order, ``[input_ids N | positions N | out_loc N |
    logits_indices L | extend_lens R | prefix_lens R | rows R | state_slots R |
    state_write_slots R | checkpoint_slots R | state_stamps R]``; ``batch`` is the
    all-padding step over views of ``flat`` and ``page_table`` (its host lists describe every row:
    the batch a graph is captured with).
    """

    shape: GraphShape
    flat: torch.Tensor
    page_table: torch.Tensor  #: (R, max_pages) int64
    batch: ForwardBatch

    def view(self, extend_lens: list[int], prefix_lens: list[int], phase: Phase,
             **fields) -> ForwardBatch:
        """The same tensors with the live step's host lists (what ``prepare_for_replay`` sees)."""
        return dataclasses.replace(self.batch, phase=phase, extend_lens_cpu=extend_lens,
                                   prefix_lens_cpu=prefix_lens, **fields)
