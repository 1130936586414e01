"""The one ``ForwardBatch`` builder: the engine's runner and the testing kit both use it.

Each request of a step is a ``StepSeq``: its row in the device tables, how many of its tokens are
already in the KV pool, its new tokens and its pages. ``ForwardBatchBuilder.build`` turns a list of
them into a ``ForwardBatch`` with the host work done once and the device work in a fixed handful
of operations:

- the request-to-page table lives on the device, one row per request; a step writes only the
  pages a row gained since the last step (a row whose page list is a new list object is rewritten
  whole, which is how a retracted or re-admitted request starts over);
- every small host array of the step goes into one (pinned, on CUDA) staging buffer and reaches
  the device in one non-blocking copy; nothing in ``build`` waits for the device;
- a decode whose token was sampled by the previous step but is not yet known on the host
  (``new_tokens=None``) reads it from the device table ``last_tokens[row]``, so the host can
  prepare step n+1 while step n still runs.

Logit rows (``ForwardBatch.logits_indices``): first every request's extra rows, in batch order,
then the last row of each request that samples::

    [ extra rows of r0 | extra rows of r1 | ... ][ sample row of each sampling request ]

A captured CUDA graph reads fixed tensors by address: ``static_batch(shape)`` allocates them for
one ``GraphShape`` (and fills them with padding rows), and ``build(seqs, into=static)`` writes a
live step into them, padded to the shape (``pad_extend_lens``; padded rows over the reserved page 0,
state slot 0 and table row 0), still with one staging copy: the padding is laid out on the host in
the same buffer, then one device copy into the static block, one gather of the page-table rows.

Staging layout of one step (T new tokens, N logit rows, B requests, U page-table updates,
D device-side tokens; padded to the shape's sizes with ``into``)::

    [ input_ids T | positions T | out_loc T | logits_indices N | extend B | prefix B |
      rows B | state_slots B | write_slots B | checkpoint_slots B | stamps B |
      upd_row U | upd_col U | upd_page U | dev_tok_idx D | dev_tok_row D ]

Recurrent state (hybrid models): a request reads ``state_slot`` and its state after the step is
written to ``state_write_slot`` (the same slot unless a checkpoint is kept at the step's end);
``checkpoint_len``/``checkpoint_slot`` keep the state after that many of its new tokens too (a
checkpoint inside the step); every state write also writes the step's ``stamp`` (the receipt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hinge.forward import ForwardBatch, Phase
from hinge.static_batch import GraphShape, StaticBatch, pad_extend_lens

__all__ = ["ForwardBatchBuilder", "GraphShape", "StaticBatch", "StepSeq", "infer_phase",
           "pad_extend_lens"]

#: per-request columns of the staging block: extend, prefix, rows, state slots read, state slots
#: written, checkpoint slots, stamps
NUM_ROW_COLUMNS = 7


@dataclass
class StepSeq:
    """One request's share of a step."""

    row: int  #: the request's row in the builder's device tables (1..max_rows-1; 0 is padding)
    prefix_len: int  #: tokens already in the KV pool
    extend_len: int  #: new tokens this step
    #: the request's pages, covering ``prefix_len + extend_len`` tokens. The builder remembers the
    #: list object: it may grow between steps; to change it otherwise, assign a new list.
    pages: list[int]
    #: host ids of the new tokens, or None for a one-token decode whose id is on the device
    #: (``ForwardBatchBuilder.last_tokens[row]``, written by the sampler of the previous step).
    new_tokens: Sequence[int] | None = None
    state_slot: int | None = None
    #: slot the state after the step is written to; None = ``state_slot`` (a checkpoint at the
    #: step's end is a write into a slot other than the one read)
    state_write_slot: int | None = None
    #: keep the state after this many new tokens (``1..extend_len - 1``) in ``checkpoint_slot``
    #: too; 0 = no checkpoint inside the step
    checkpoint_len: int = 0
    checkpoint_slot: int = 0
    #: rows of this request (0-based within its new tokens) whose logits are computed, besides
    #: the sampling row (prompt logprobs, or every row in model tests)
    logits_rows: Sequence[int] = ()
    #: whether the request samples from its last row this step
    sample: bool = False


def infer_phase(seqs: Sequence[StepSeq]) -> Phase:
    """``decode`` when every request runs one token after a prefix, ``prefill`` when none does."""
    decode = [s.prefix_len > 0 and s.extend_len == 1 for s in seqs]
    if all(decode):
        return "decode"
    return "mixed" if any(decode) else "prefill"


class ForwardBatchBuilder:
    """Owns the device tables of a pool of request rows and builds each step's ``ForwardBatch``.

    :param max_rows: rows of the tables (row 0 is reserved for padded graph rows).
    :param max_pages: pages one request may hold (``ceil(max_model_len / page_size)``).
    """

    def __init__(self, *, page_size: int, max_rows: int, max_pages: int,
                 device: str | torch.device) -> None:
        self.page_size = page_size
        self.device = torch.device(device)
        self.max_rows, self.max_pages = max_rows, max_pages
        self.page_table = torch.zeros(max_rows, max_pages, dtype=torch.int64, device=self.device)
        #: the last sampled token of each row (the sampler writes it; decode steps read it)
        self.last_tokens = torch.zeros(max_rows, dtype=torch.int64, device=self.device)
        self._row_pages: list[list[int] | None] = [None] * max_rows
        self._row_synced = [0] * max_rows
        self._pinned = self.device.type == "cuda"
        self._staging: list[torch.Tensor] = []
        self._events: list[torch.cuda.Event | None] = []
        self._turn = 0
        self._dev_buf = torch.empty(0, dtype=torch.int64, device=self.device)

    # -- device tables ------------------------------------------------------------------------

    def _page_updates(self, seqs: Sequence[StepSeq]) -> tuple[list[int], list[int], list[int]]:
        rows: list[int] = []
        cols: list[int] = []
        vals: list[int] = []
        for s in seqs:
            pages, row = s.pages, s.row
            assert 0 < row < self.max_rows, f"row {row} outside 1..{self.max_rows - 1}"
            if self._row_pages[row] is not pages:
                self._row_pages[row], self._row_synced[row] = pages, 0
            start, end = self._row_synced[row], len(pages)
            if end > self.max_pages:
                raise ValueError(f"request holds {end} pages, more than the {self.max_pages} a row "
                                 "of the page table has (max_model_len / page_size)")
            if end > start:
                rows.extend([row] * (end - start))
                cols.extend(range(start, end))
                vals.extend(pages[start:end])
                self._row_synced[row] = end
        return rows, cols, vals

    # -- staging ------------------------------------------------------------------------------

    def _stage(self, n: int) -> np.ndarray:
        """A host int64 buffer of at least ``n`` elements that no pending copy still reads."""
        if len(self._staging) < 2:
            self._staging, self._events = [], []
            for _ in range(2):
                self._staging.append(torch.empty(max(n, 4096), dtype=torch.int64,
                                                 pin_memory=self._pinned))
                self._events.append(None)
        self._turn ^= 1
        event = self._events[self._turn]
        if event is not None:
            event.synchronize()
        if self._staging[self._turn].numel() < n:
            self._staging[self._turn] = torch.empty(2 * n, dtype=torch.int64, pin_memory=self._pinned)
        return self._staging[self._turn].numpy()

    def _upload(self, n: int) -> torch.Tensor:
        host = self._staging[self._turn][:n]
        if self.device.type == "cpu":
            return host.clone()
        if self._dev_buf.numel() < n:
            self._dev_buf = torch.empty(2 * n, dtype=torch.int64, device=self.device)
        dev = self._dev_buf[:n]
        dev.copy_(host, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._events[self._turn] = event
        return dev

    # -- one step -----------------------------------------------------------------------------

    def build(self, seqs: Sequence[StepSeq], *, phase: Phase | None = None,
              track_states: bool = False, capture_hidden_layers: tuple[int, ...] = (),
              into: StaticBatch | None = None, stamp: int = 0) -> ForwardBatch:
        """The ``ForwardBatch`` of one step over ``seqs`` (in that order).

        ``stamp`` is written beside every recurrent state the step writes (``state_stamps``):
        the runner numbers its steps and reads the stamps of checkpoint slots back as receipts.

        With ``into`` (a captured shape's tensors, ``static_batch``) the step is written into them,
        padded to the shape (the caller checked that it fits), and the batch returned is their view
        with the live host lists.
        """
        assert seqs or into is not None, "a step needs at least one request"
        ps = self.page_size
        ext = [s.extend_len for s in seqs]
        pre = [s.prefix_len for s in seqs]
        b, t = len(seqs), sum(ext)
        n_extra = sum(len(s.logits_rows) for s in seqs)
        n = n_extra + sum(s.sample for s in seqs)
        # sizes of the staged block: the live step's, or the captured shape's
        big_b, big_t, big_n = (b, t, n) if into is None else (
            into.shape.num_requests, into.shape.num_tokens, into.shape.num_logits)
        assert b <= big_b and t <= big_t and n <= big_n, (
            f"a step of {b} requests, {t} tokens, {n} logit rows does not fit {into and into.shape}")
        upd_rows, upd_cols, upd_vals = self._page_updates(seqs)
        u = len(upd_rows)
        dev_idx = [i for i, s in enumerate(seqs) if s.new_tokens is None]
        d = len(dev_idx)
        block = 3 * big_t + big_n + NUM_ROW_COLUMNS * big_b
        total = block + 3 * u + 2 * d
        buf = self._stage(total)
        ids, pos, loc = buf[:big_t], buf[big_t:2 * big_t], buf[2 * big_t:3 * big_t]
        logits_at, sample_at = 3 * big_t, 3 * big_t + n_extra
        row0 = 0
        for s in seqs:
            e, p = s.extend_len, s.prefix_len
            if e == 1:
                pos[row0] = p
                loc[row0] = s.pages[p // ps] * ps + p % ps
                ids[row0] = 0 if s.new_tokens is None else s.new_tokens[0]
            elif e:
                assert s.new_tokens is not None and len(s.new_tokens) == e, (
                    f"row {s.row}: {e} new tokens, got {None if s.new_tokens is None else len(s.new_tokens)} ids")
                positions = np.arange(p, p + e)
                ids[row0:row0 + e] = s.new_tokens
                pos[row0:row0 + e] = positions
                loc[row0:row0 + e] = np.asarray(s.pages)[positions // ps] * ps + positions % ps
            k = len(s.logits_rows)
            if k:
                buf[logits_at:logits_at + k] = s.logits_rows
                buf[logits_at:logits_at + k] += row0
                logits_at += k
            if s.sample:
                buf[sample_at] = row0 + e - 1
                sample_at += 1
            row0 += e
        at = 3 * big_t + big_n
        buf[at:at + b] = ext
        buf[at + big_b:at + big_b + b] = pre
        buf[at + 2 * big_b:at + 2 * big_b + b] = [s.row for s in seqs]
        buf[at + 3 * big_b:at + 3 * big_b + b] = [0 if s.state_slot is None else s.state_slot for s in seqs]
        buf[at + 4 * big_b:at + 4 * big_b + b] = [
            (s.state_slot or 0) if s.state_write_slot is None else s.state_write_slot for s in seqs]
        buf[at + 5 * big_b:at + 5 * big_b + b] = [s.checkpoint_slot if s.checkpoint_len else 0
                                                  for s in seqs]
        buf[at + 6 * big_b:at + 6 * big_b + b] = stamp
        for s in seqs:
            assert 0 <= s.checkpoint_len < max(s.extend_len, 1), (
                f"row {s.row}: a checkpoint after {s.checkpoint_len} of {s.extend_len} new tokens "
                "(one at the step's end is a state_write_slot)")
        if into is not None:
            self._stage_padding(buf, b, t, n, big_b, big_t, big_n)
        at = block
        if u:
            buf[at:at + u], buf[at + u:at + 2 * u], buf[at + 2 * u:at + 3 * u] = upd_rows, upd_cols, upd_vals
        at += 3 * u
        if d:
            cu = np.cumsum([0, *ext])
            buf[at:at + d] = cu[dev_idx]
            buf[at + d:at + 2 * d] = [seqs[i].row for i in dev_idx]
        dev = self._upload(total)
        # device side: page-table rows, then this step's views (or the static tensors)
        at = block
        if u:
            self.page_table[dev[at:at + u], dev[at + u:at + 2 * u]] = dev[at + 2 * u:at + 3 * u]
        at += 3 * u
        if into is not None:
            into.flat.copy_(dev[:block])
            torch.index_select(self.page_table, 0, into.batch.rows, out=into.page_table)
            if d:
                into.batch.input_ids.index_copy_(
                    0, dev[at:at + d], self.last_tokens.index_select(0, dev[at + d:at + 2 * d]))
            return into.view(ext, pre, phase or infer_phase(seqs), track_states=track_states,
                             capture_hidden_layers=tuple(capture_hidden_layers),
                             checkpoint_lens_cpu=[s.checkpoint_len for s in seqs])
        input_ids = dev[:t]
        if d:
            input_ids.index_copy_(0, dev[at:at + d], self.last_tokens.index_select(0, dev[at + d:at + 2 * d]))
        at = 3 * t + n
        rows = dev[at + 2 * b:at + 3 * b]
        max_pages = max(-(-(pr + e) // ps) for pr, e in zip(pre, ext, strict=True))
        has_state = any(s.state_slot is not None for s in seqs)
        mid = any(s.checkpoint_len for s in seqs)
        cols = at + 4 * b
        return ForwardBatch(
            phase=phase or infer_phase(seqs),
            input_ids=input_ids,
            positions=dev[t:2 * t],
            extend_lens=dev[at:at + b],
            prefix_lens=dev[at + b:at + 2 * b],
            page_table=self.page_table.index_select(0, rows)[:, :max(max_pages, 1)],
            out_loc=dev[2 * t:3 * t],
            logits_indices=dev[3 * t:3 * t + n],
            state_slots=dev[at + 3 * b:at + 4 * b] if has_state else None,
            state_write_slots=dev[cols:cols + b] if has_state else None,
            checkpoint_slots=dev[cols + b:cols + 2 * b] if mid else None,
            state_stamps=dev[cols + 2 * b:cols + 3 * b] if has_state else None,
            track_states=track_states,
            capture_hidden_layers=tuple(capture_hidden_layers),
            extend_lens_cpu=ext,
            prefix_lens_cpu=pre,
            checkpoint_lens_cpu=[s.checkpoint_len for s in seqs],
            rows=rows,
        )

    def _stage_padding(self, buf: np.ndarray, b: int, t: int, n: int, big_b: int, big_t: int,
                       big_n: int) -> None:
        """Padded rows ``b..big_b-1`` and tokens ``t..big_t-1`` (``pad_extend_lens``): prefix 0,
        positions ``0..k-1`` within each padded row, KV slots in the reserved page 0, table row 0,
        state slot 0 read and written, no checkpoint (slot 0), stamp 0, token id 0; padded logit
        rows read token row 0. Every value is written on
        every step, so nothing of an earlier, larger step survives (invariant 4)."""
        pad = pad_extend_lens([], big_t - t, big_b - b)
        if big_t > t:
            starts = np.repeat(np.cumsum([0, *pad[:-1]]), pad)
            positions = np.arange(big_t - t) - starts
            buf[t:big_t] = 0
            buf[big_t + t:2 * big_t] = positions
            buf[2 * big_t + t:3 * big_t] = positions % self.page_size
        buf[3 * big_t + n:3 * big_t + big_n] = 0
        at = 3 * big_t + big_n
        buf[at + b:at + big_b] = pad
        for k in range(1, NUM_ROW_COLUMNS):  # prefix 0, table row 0, state slots 0, stamp 0
            buf[at + k * big_b + b:at + (k + 1) * big_b] = 0

    def static_batch(self, shape: GraphShape, *, page_table: torch.Tensor | None = None) -> StaticBatch:
        """Allocate the fixed tensors of one captured shape and fill them with padding rows.

        :param page_table: (>= R, max_pages) int64 storage to take the first R rows of (shapes may
            share one; a replay rewrites all R rows it reads); None allocates its own.
        """
        r, t, n = shape.num_requests, shape.num_tokens, shape.num_logits
        flat = torch.zeros(3 * t + n + NUM_ROW_COLUMNS * r, dtype=torch.int64, device=self.device)
        if page_table is None:
            page_table = torch.zeros(r, self.max_pages, dtype=torch.int64, device=self.device)
        assert page_table.shape[0] >= r and page_table.shape[1] == self.max_pages, (
            f"page table {tuple(page_table.shape)} cannot hold {r} rows of {self.max_pages} pages")
        at = 3 * t + n
        batch = ForwardBatch(
            phase=shape.phase,
            input_ids=flat[:t],
            positions=flat[t:2 * t],
            out_loc=flat[2 * t:3 * t],
            logits_indices=flat[3 * t:at],
            extend_lens=flat[at:at + r],
            prefix_lens=flat[at + r:at + 2 * r],
            rows=flat[at + 2 * r:at + 3 * r],
            state_slots=flat[at + 3 * r:at + 4 * r],
            state_write_slots=flat[at + 4 * r:at + 5 * r],
            checkpoint_slots=flat[at + 5 * r:at + 6 * r],
            state_stamps=flat[at + 6 * r:at + 7 * r],
            page_table=page_table[:r],
            extend_lens_cpu=pad_extend_lens([], t, r),
            prefix_lens_cpu=[0] * r,
            checkpoint_lens_cpu=[0] * r,
        )
        static = StaticBatch(shape, flat, page_table[:r], batch)
        self.build([], into=static, phase=shape.phase)
        return static
