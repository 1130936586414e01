"""Input preparation and the forward pass: ScheduledBatch -> ForwardBatch -> logits.

Logit rows asked of the model (``logits_indices``), per request in batch order::

    [ prompt-logprob rows of this chunk ... ][ the last row, if the request samples this step ]

A request samples when this step brings all its tokens into the KV pool (its prefill finishes or
it decodes). Row ``p`` (absolute position ``p``) gives the logprob of prompt token ``p + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hinge.forward import ForwardBatch, ForwardContext

if TYPE_CHECKING:
    from hinge.contracts import AttentionBackend
    from hinge.engine.request import Request, ScheduledBatch
    from hinge.forward import KVCache


@dataclass
class StepLogits:
    """Logits of one step, split by purpose."""

    sample_reqs: list[Request]  #: requests that sample a token this step, in batch order
    sample_logits: torch.Tensor  #: (len(sample_reqs), vocab) float32
    #: per request with prompt logprobs this step: (request, rows of ``prompt_logits``, target ids)
    prompt_rows: list[tuple[Request, list[int], list[int]]]
    prompt_logits: torch.Tensor | None  #: (P, vocab) float32


class ModelRunner:
    def __init__(self, model: Any, attn: AttentionBackend, kv: KVCache, device: str | torch.device,
                 states: Any = None):
        self.model = model
        self.attn = attn
        self.kv = kv
        self.states = states
        self.device = torch.device(device)
        self.num_forward_steps = 0
        self.eager_steps: dict[str, int] = {}  #: by batch phase; graph replays will count apart

    def prepare(self, sched: ScheduledBatch) -> tuple[ForwardBatch, list[Request],
                                                      list[tuple[Request, list[int], list[int]]]]:
        """Flatten ``sched`` into host lists, then one tensor each on the device."""
        ps = self.kv.page_size
        input_ids: list[int] = []
        positions: list[int] = []
        out_loc: list[int] = []
        logits_rows: list[int] = []
        sample_reqs: list[Request] = []
        prompt_rows: list[tuple[Request, list[int], list[int]]] = []
        prefix_lens = [r.num_computed for r in sched.reqs]
        max_pages = max(len(r.pages) for r in sched.reqs)
        page_rows: list[list[int]] = []
        for req, n in zip(sched.reqs, sched.extend_lens, strict=True):
            start = req.num_computed
            row0 = len(input_ids)
            input_ids.extend(req.token_slice(start, start + n))
            positions.extend(range(start, start + n))
            pages = req.pages
            out_loc.extend(pages[p // ps] * ps + p % ps for p in range(start, start + n))
            page_rows.append(pages + [0] * (max_pages - len(pages)))
            targets = self._prompt_targets(req, start, n)
            if targets:
                rows = list(range(len(logits_rows), len(logits_rows) + len(targets)))
                logits_rows.extend(row0 + (p - 1 - start) for p in targets)
                prompt_rows.append((req, rows, [req.prompt_ids[p] for p in targets]))
            if start + n == req.num_tokens:
                sample_reqs.append(req)
        sample_rows = self._last_rows(sched, sample_reqs)
        dev = self.device
        i64 = {"dtype": torch.int64, "device": dev}
        batch = ForwardBatch(
            phase=sched.phase,
            input_ids=torch.tensor(input_ids, **i64),
            positions=torch.tensor(positions, **i64),
            extend_lens=torch.tensor(sched.extend_lens, **i64),
            prefix_lens=torch.tensor(prefix_lens, **i64),
            page_table=torch.tensor(page_rows, **i64),
            out_loc=torch.tensor(out_loc, **i64),
            logits_indices=torch.tensor(logits_rows + sample_rows, **i64),
            state_slots=None if all(r.state_slot is None for r in sched.reqs) else torch.tensor(
                [r.state_slot if r.state_slot is not None else 0 for r in sched.reqs], **i64),
            extend_lens_cpu=list(sched.extend_lens),
            prefix_lens_cpu=prefix_lens,
        )
        return batch, sample_reqs, prompt_rows

    @staticmethod
    def _prompt_targets(req: Request, start: int, n: int) -> list[int]:
        """Prompt positions whose logprob this chunk computes (row ``p - 1`` is in the chunk)."""
        first = req.prompt_logprobs_from
        if first is None:
            return []
        first = max(first + len(req.prompt_logprobs), start + 1)
        return list(range(first, min(start + n + 1, req.num_prompt)))

    @staticmethod
    def _last_rows(sched: ScheduledBatch, sample_reqs: list[Request]) -> list[int]:
        rows, end = [], 0
        sampling = set(map(id, sample_reqs))
        for req, n in zip(sched.reqs, sched.extend_lens, strict=True):
            end += n
            if id(req) in sampling:
                rows.append(end - 1)
        return rows

    def forward(self, sched: ScheduledBatch) -> StepLogits:
        batch, sample_reqs, prompt_rows = self.prepare(sched)
        batch.attn_metadata = self.attn.prepare_metadata(batch)
        ctx = ForwardContext(batch=batch, attn=self.attn, kv=self.kv, states=self.states)
        logits = self._run_model(ctx).logits
        num_prompt = sum(len(rows) for _, rows, _ in prompt_rows)
        self.num_forward_steps += 1
        return StepLogits(
            sample_reqs=sample_reqs,
            sample_logits=logits[num_prompt:],
            prompt_rows=prompt_rows,
            prompt_logits=logits[:num_prompt] if num_prompt else None,
        )

    def _run_model(self, ctx: ForwardContext):
        # eager; a captured graph's replay plugs in here (engine/graphs.py, GPU runtime issue)
        phase = ctx.batch.phase
        self.eager_steps[phase] = self.eager_steps.get(phase, 0) + 1
        with torch.inference_mode():
            return self.model.forward(ctx)
