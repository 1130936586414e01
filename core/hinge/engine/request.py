"""A request's tokens and lengths (every count is a property), the scheduled batch, the output.

Token layout of one request (``|`` marks the KV boundary)::

    tokens    [ prompt (num_prompt) ][ output (num_output) ][ pending ]   = num_tokens
    all_ids   [ prompt              ][ output              ]             (host-known ids)
    KV        [ num_computed tokens | extend_len tokens not yet in KV ]

``pending`` tokens were sampled by a step still running on the device (overlap scheduling):
their ids reach the host one step later, and a decode of such a token reads it on the device.

``cached_tokens`` of those ``num_computed`` came from the prefix cache. A decoding request has
``extend_len == 1`` (the last sampled token); a retracted one is requeued with ``num_computed = 0``
and recomputes prompt and output in its next prefill.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hinge.contracts import CacheHit
    from hinge.forward import Phase
    from hinge.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Request:
    def __init__(self, rid: str, prompt_ids: list[int], params: SamplingParams, arrival: int = 0):
        self.rid = rid
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.arrival = arrival
        self.status = RequestStatus.WAITING
        self.output_ids: list[int] = []
        #: tokens sampled on the device whose ids the host does not know yet (overlap: the step
        #: that sampled them is still running); they count in ``num_tokens``, not in ``all_ids``
        self.num_pending = 0
        self.num_computed = 0  #: tokens whose KV is in ``pages`` (or is being written)
        self.pages: list[int] = []
        self.row: int | None = None  #: row in the runner's device tables while running
        self.state_slot: int | None = None  #: its own recurrent-state slot (hybrid models)
        #: read the state from this slot in the next step (the last step ended on a checkpoint)
        self.state_source: int | None = None
        #: the latest confirmed checkpoint it holds: (position, checkpoint slot)
        self.checkpoint: tuple[int, int] | None = None
        #: checkpoints held until insert whatever comes later (branch points): position -> slot
        self.kept_checkpoints: dict[int, int] = {}
        #: checkpoints written by steps whose receipt has not been read yet
        self.pending_checkpoints: list[PlannedCheckpoint] = []
        self.cache_hit: CacheHit | None = None  #: locked prefix-cache hit while running
        #: prefix-cache namespace: requests with different salts never share cached tokens
        self.cache_salt: str | None = getattr(params, "cache_salt", None)
        self.cached_tokens = 0  #: prompt tokens served from the prefix cache (first admission)
        self.num_retractions = 0
        #: the seed of its draws (``hinge.engine.draw``): ``params.seed`` or one from the engine's
        #: seeded stream; None for greedy requests
        self.sample_seed: int | None = None
        # client-visible results
        self.text = ""
        self.finish_reason: str | None = None
        self.matched_stop: int | str | None = None
        self.logprobs: list[float] = []
        self.top_logprobs: list[list[tuple[int, float]]] = []
        self.prompt_logprobs: list[float] = []
        self.prompt_top_logprobs: list[list[tuple[int, float]]] = []
        #: structured output: the grammar backend's matcher (``hinge.grammar.GrammarMatcher``)
        self.grammar: Any = None
        self.detok: Any = None  #: incremental detokenizer state, owned by the engine
        self.num_emitted_chars = 0  #: text already streamed (a possible stop-string prefix waits)
        self.spec_verify_ct = 0
        self.spec_accepted_tokens = 0

    # lengths --------------------------------------------------------------------------------
    @property
    def num_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_output(self) -> int:
        return len(self.output_ids)

    # NOTE: the lengths below are written out rather than built from each other: the scheduler,
    # the runner and the output path read them a few times per request per step (at batch 64 the
    # chain of properties was ~2,000 calls a step)

    @property
    def num_generated(self) -> int:
        """Output tokens drawn so far, known on the host or not."""
        return len(self.output_ids) + self.num_pending

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids) + self.num_pending

    @property
    def extend_len(self) -> int:
        """Tokens this request still has to run through the model before it can sample."""
        return len(self.prompt_ids) + len(self.output_ids) + self.num_pending - self.num_computed

    @property
    def is_decoding(self) -> bool:
        generated = len(self.output_ids) + self.num_pending
        return generated > 0 and len(self.prompt_ids) + generated - self.num_computed == 1

    @property
    def can_decode(self) -> bool:
        """Decoding and still allowed another token (a token still pending may be its last)."""
        return self.is_decoding and self.num_generated < self.params.max_new_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def token_slice(self, start: int, end: int) -> list[int]:
        """``all_ids[start:end]`` without building ``all_ids``."""
        n = self.num_prompt
        if start >= n:
            return self.output_ids[start - n:end - n]
        if end <= n:
            return self.prompt_ids[start:end]
        return self.prompt_ids[start:] + self.output_ids[:end - n]

    @property
    def prompt_logprobs_from(self) -> int | None:
        """First prompt position whose logprob is returned (position 0 has none), or None."""
        start = self.params.prompt_logprobs_start
        if start is None:
            return None
        return max(start, 1)

    def __repr__(self) -> str:
        return (f"Request({self.rid!r}, {self.status.value}, prompt={self.num_prompt}, "
                f"output={self.num_output}, computed={self.num_computed}, pages={len(self.pages)})")


@dataclass
class PlannedCheckpoint:
    """A recurrent-state checkpoint a step writes for a request: the state after ``position``
    tokens into ``slot``; it counts once the step's receipt says every layer wrote it."""

    position: int
    slot: int
    keep: bool = False  #: a branch point: held until insert even when later ones are confirmed
    phase: str = "prefill"  #: ``decode`` when written by the request's decode step (counters)


@dataclass
class StatePlan:
    """One request's recurrent-state slots in a step (hybrid models)."""

    read_slot: int
    write_slot: int  #: the slot read, or the checkpoint slot when the step ends on a checkpoint
    checkpoint_len: int = 0  #: a checkpoint inside the step: after this many of its new tokens
    checkpoint_slot: int = 0
    checkpoint: PlannedCheckpoint | None = None


@dataclass
class ScheduledBatch:
    """What ``Scheduler.schedule`` picked: each request runs ``extend_lens[i]`` new tokens."""

    phase: Phase
    reqs: list[Request]
    extend_lens: list[int]
    #: state-slot zeroing and copies to run before the step (``hinge.engine.state_pool``)
    state_moves: Any = None
    #: hybrid models: per request, its state slots and checkpoint (None for dense models)
    state_plans: list[StatePlan] | None = None
    #: set by the runner: which checkpoint slots the step really wrote (``CheckpointReceipt``),
    #: and whether it ran eager or replayed a CUDA graph
    receipt: Any = None
    path: str = "eager"

    @property
    def checkpoints(self) -> list[tuple[Request, PlannedCheckpoint]]:
        """The step's checkpoints, in batch order."""
        if not self.state_plans:
            return []
        return [(r, p.checkpoint) for r, p in zip(self.reqs, self.state_plans, strict=True)
                if p.checkpoint is not None]

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_lens)


@dataclass
class RequestOutput:
    """What one step did for one request (see docs/internals.md).

    Per step: ``new_token_ids``, ``new_text``, ``new_logprobs``, ``new_top_logprobs`` (deltas) and
    ``text`` (the whole text so far). The whole lists ``token_ids``, ``logprobs``, ``top_logprobs``
    are set only on the final output (``finished``); None before. ``prompt_logprobs`` (and
    ``prompt_top_logprobs``) come on the first output that carries a token and on the final one.
    ``prompt_logprobs[i]`` is the logprob of prompt position ``max(prompt_logprobs_start, 1) + i``
    (position 0 has no logprob and is omitted). Logprobs are of the raw model logits.
    """

    rid: str
    prompt_token_ids: list[int]
    token_ids: list[int] | None
    new_token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    matched_stop: int | str | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    prompt_logprobs: list[float] | None = None
    #: per prompt logprob position, the most likely (token id, logprob) pairs
    prompt_top_logprobs: list[list[tuple[int, float]]] | None = None
    cached_tokens: int = 0
    spec_verify_ct: int = 0
    spec_accepted_tokens: int = 0
    new_text: str = ""  #: text produced by this step (for streaming)
    new_logprobs: list[float] = field(default_factory=list)  #: of ``new_token_ids``
    new_top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
