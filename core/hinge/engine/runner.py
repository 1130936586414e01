"""Input preparation and the forward pass: ScheduledBatch -> ForwardBatch -> logits.

Logit rows asked of the model (``logits_indices``, laid out by ``hinge.batching``)::

    [ prompt-logprob rows of every request, in batch order ][ last row of each sampling request ]

A request samples when this step brings all its tokens into the KV pool (its prefill finishes or
it decodes). Row ``p`` (absolute position ``p``) gives the logprob of prompt token ``p + 1``.

With CUDA graphs (``graphs``, a ``hinge.engine.graphs.GraphRunner`` the engine captured at start)
a step that fits a captured shape replays it; any other step runs eager and is counted in
``eager_steps`` by its batch phase.

Attention per phase: prefill and mixed steps run ``attn``, decode and verify steps
``attn_decode`` (the same object unless the plan selected ``attention_decode``).

Hybrid models: every step is numbered (its stamp, written by every recurrent layer beside each
state it writes); a step with checkpoints leaves a receipt on ``ScheduledBatch.receipt`` (which
checkpoint slots every layer really wrote, eager or graph: ``StatePool.receipt``) and says which
path ran in ``ScheduledBatch.path``. The engine reads the receipt with the step's results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hinge.batching import ForwardBatchBuilder, StepSeq
from hinge.forward import ForwardBatch, ForwardContext

if TYPE_CHECKING:
    from hinge.contracts import AttentionBackend
    from hinge.engine.graphs import GraphRunner
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
    """Runs scheduled batches through the model; owns the ``ForwardBatchBuilder`` (device page
    table by request row, one staging copy per step)."""

    def __init__(self, model: Any, attn: AttentionBackend, kv: KVCache, device: str | torch.device,
                 states: Any = None, *, max_rows: int = 65, max_pages: int | None = None,
                 attn_decode: AttentionBackend | None = None):
        self.model = model
        self.attn = attn
        #: the backend of decode and verify steps (``attn`` unless the plan splits the phases)
        self.attn_decode = attn_decode if attn_decode is not None else attn
        self.kv = kv
        self.states = states
        self.device = torch.device(device)
        self.builder = ForwardBatchBuilder(
            page_size=kv.page_size, max_rows=max_rows,
            max_pages=max_pages if max_pages is not None else kv.num_pages, device=self.device)
        self.num_forward_steps = 0
        self.eager_steps: dict[str, int] = {}  #: by batch phase; graph replays count apart
        self.graphs: GraphRunner | None = None  #: set by the engine when the plan allows graphs
        self.stamp = 0  #: the last step's stamp (recurrent-state receipts)

    def attn_for(self, phase: str) -> AttentionBackend:
        """The attention backend of a batch phase (decode and verify: ``attn_decode``)."""
        return self.attn_decode if phase in ("decode", "verify") else self.attn

    @property
    def graph_replays(self) -> dict[str, int]:
        """Replays by graph phase (prefill, decode); empty without graphs."""
        return dict(self.graphs.replays) if self.graphs is not None else {}

    def prepare(self, sched: ScheduledBatch) -> tuple[ForwardBatch, list[Request],
                                                      list[tuple[Request, list[int], list[int]]]]:
        """``sched`` as one ``StepSeq`` per request -> ``ForwardBatch`` (the shared builder)."""
        seqs, sample_reqs, prompt_rows = self.step_seqs(sched)
        return self.builder.build(seqs, phase=sched.phase), sample_reqs, prompt_rows

    def step_seqs(self, sched: ScheduledBatch) -> tuple[list[StepSeq], list[Request],
                                                        list[tuple[Request, list[int], list[int]]]]:
        """One ``StepSeq`` per scheduled request, the requests that sample, the prompt-logprob rows."""
        seqs: list[StepSeq] = []
        sample_reqs: list[Request] = []
        prompt_rows: list[tuple[Request, list[int], list[int]]] = []
        num_prompt_rows = 0
        for req, n in zip(sched.reqs, sched.extend_lens, strict=True):
            start = req.num_computed
            targets = self._prompt_targets(req, start, n)
            if targets:
                prompt_rows.append((req, list(range(num_prompt_rows, num_prompt_rows + len(targets))),
                                    [req.prompt_ids[p] for p in targets]))
                num_prompt_rows += len(targets)
            samples = start + n == req.num_tokens
            if samples:
                sample_reqs.append(req)
            assert req.row is not None, f"{req} was scheduled without a table row"
            seq = StepSeq(
                row=req.row, prefix_len=start, extend_len=n, pages=req.pages,
                new_tokens=None if n == 1 and req.num_pending else req.token_slice(start, start + n),
                state_slot=req.state_slot,
                logits_rows=[p - 1 - start for p in targets], sample=samples)
            if sched.state_plans is not None:
                plan = sched.state_plans[len(seqs)]
                seq.state_slot, seq.state_write_slot = plan.read_slot, plan.write_slot
                seq.checkpoint_len, seq.checkpoint_slot = plan.checkpoint_len, plan.checkpoint_slot
            seqs.append(seq)
        return seqs, sample_reqs, prompt_rows

    @staticmethod
    def _prompt_targets(req: Request, start: int, n: int) -> list[int]:
        """Prompt positions whose logprob this chunk computes (row ``p - 1`` is in the chunk)."""
        first = req.prompt_logprobs_from
        if first is None:
            return []
        first = max(first + len(req.prompt_logprobs), start + 1)
        return list(range(first, min(start + n + 1, req.num_prompt)))

    def forward(self, sched: ScheduledBatch) -> StepLogits:
        if sched.state_moves:
            self.states.apply(sched.state_moves)
        seqs, sample_reqs, prompt_rows = self.step_seqs(sched)
        self.stamp += 1
        graph = self.graphs.find(seqs, phase=sched.phase) if self.graphs is not None else None
        if graph is not None:
            logits = self.graphs.replay(graph, seqs, sched.phase, stamp=self.stamp)
            sched.path = "graph"
        else:
            batch = self.builder.build(seqs, phase=sched.phase, stamp=self.stamp)
            attn = self.attn_for(batch.phase)
            batch.attn_metadata = attn.prepare_metadata(batch)
            ctx = ForwardContext(batch=batch, attn=attn, kv=self.kv, states=self.states)
            logits = self._run_model(ctx).logits
            sched.path = "eager"
        checkpoints = sched.checkpoints
        if checkpoints:
            sched.receipt = self.states.receipt([ck.slot for _, ck in checkpoints], self.stamp)
        num_prompt = sum(len(rows) for _, rows, _ in prompt_rows)
        self.num_forward_steps += 1
        return StepLogits(
            sample_reqs=sample_reqs,
            sample_logits=logits[num_prompt:],
            prompt_rows=prompt_rows,
            prompt_logits=logits[:num_prompt] if num_prompt else None,
        )

    def _run_model(self, ctx: ForwardContext):
        """The eager path (a step no captured graph fits), counted by batch phase."""
        phase = ctx.batch.phase
        self.eager_steps[phase] = self.eager_steps.get(phase, 0) + 1
        with torch.inference_mode():
            return self.model.forward(ctx)
