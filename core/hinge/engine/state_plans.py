"""Recurrent-state slots of running requests and their checkpoints (hybrid models).

Each running request owns one working slot of the state pool (``Request.state_slot``). The
prefix cache decides where a request keeps checkpoints (``CachePolicy.plan_checkpoint``: on the
``track_interval`` grid, at branch points); the ``StatePlanner`` turns that into slots for each
step (``StatePlan``) and follows every checkpoint from the step that writes it to the cache:

    planned (slot from the checkpoint region)  ->  written by the step (the runner's receipt)
      ->  held by the request (the latest one; branch points too)  ->  offered to insert

- a checkpoint at the step's end is the step's ordinary state write aimed at the checkpoint slot
  (``write_slot``); the request reads its state from there in its next step and writes its own
  slot again (no copy). One inside the step is kept by the layers' split run (``checkpoint_len``);
- a checkpoint counts only once the receipt says every recurrent layer wrote it; a request leaving
  before that frees the slot (a slot nobody wrote never reaches the cache);
- on release, checkpoints past what the client received (``cached_len``) are freed, the rest are
  offered to the cache with the tokens (invariant 2);
- mid chunked prefill (policies with ``caches_unfinished``): ``offer_running`` hands the cache the
  confirmed checkpoints the request no longer reads (never ``state_source``, the slot its next step
  reads); a checkpoint replaced while the request still has prompt tokens to go is held for that
  offer, not freed (without overlap the newest one is always the next step's ``state_source`` when
  the scheduler offers); once it decodes, a finished request still offers only its last one;
- no free checkpoint slot: the cache evicts one of its own states (LRU), else the step keeps none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hinge.contracts import CacheHit
from hinge.engine.request import PlannedCheckpoint, StatePlan

if TYPE_CHECKING:
    from hinge.contracts import CachePolicy
    from hinge.engine.request import Request
    from hinge.engine.state_pool import StateMoves, StatePool


class StatePlanner:
    def __init__(self, states: StatePool, cache: CachePolicy) -> None:
        self.states = states
        self.cache = cache
        #: hold replaced prefill checkpoints for ``offer_running`` instead of freeing them
        self.offers_running = bool(getattr(cache, "caches_unfinished", False))
        self.checkpoints_planned = 0
        self.checkpoints_written = 0
        #: planned checkpoints the receipt says were not written by every layer (a bug if > 0)
        self.checkpoints_unwritten = 0
        #: planned checkpoints no slot was free for (the step kept none)
        self.checkpoints_skipped = 0

    @property
    def recurrent_cache(self) -> bool:
        ctx = self.cache.context
        return ctx is not None and ctx.recurrent

    def can_admit(self) -> bool:
        return self.states.can_allocate()

    def usable_hit(self, hit: CacheHit) -> CacheHit:
        """A hit a hybrid request can resume from: its state checkpoint with it, or nothing (the
        branch point is kept, so the prefill checkpoints it for later requests)."""
        if hit.length and hit.state_slot is None:
            return CacheHit(branch=hit.branch)  # NOTE: KV without state cannot resume
        return hit

    def admit(self, req: Request, hit: CacheHit, moves: StateMoves) -> None:
        """Give ``req`` its own slot: a copy of the hit's checkpoint (never written by the
        request: the tree's slot stays the tree's), or zeros."""
        req.state_slot = self.states.allocate(zero=False)
        req.state_source = None
        if hit.state_slot is not None:
            moves.copy.append((hit.state_slot, req.state_slot))
        else:
            moves.zero.append(req.state_slot)

    def plan(self, req: Request, start: int, n: int) -> StatePlan:
        """Slots for ``req``'s next ``n`` tokens (``start`` already in KV) and its checkpoint."""
        own = req.state_slot
        assert own is not None, f"{req} runs without a state slot"
        read = own if req.state_source is None else req.state_source
        req.state_source = None
        plan = StatePlan(read_slot=read, write_slot=own)
        if not self.recurrent_cache:
            return plan
        hit = req.cache_hit
        want = self.cache.plan_checkpoint(start, start + n, hit.branch if hit is not None else None)
        if want is None or not start < want.position <= start + n:
            return plan
        self.checkpoints_planned += 1
        slot = self._checkpoint_slot()
        if slot is None:
            self.checkpoints_skipped += 1
            return plan
        plan.checkpoint = PlannedCheckpoint(want.position, slot, want.keep,
                                            "decode" if req.is_decoding else "prefill")
        req.pending_checkpoints.append(plan.checkpoint)
        if want.position == start + n:  # at the step's end: the state write itself lands there
            plan.write_slot = slot
            req.state_source = slot
        else:
            plan.checkpoint_len, plan.checkpoint_slot = want.position - start, slot
        return plan

    def _checkpoint_slot(self) -> int | None:
        slots = self.states.checkpoints
        slot = slots.allocate()
        if slot is None and self.cache.evict_checkpoints(1):
            slot = slots.allocate()
        return slot

    def confirm(self, entries: list[tuple[Request, PlannedCheckpoint]],
                written: list[bool]) -> dict[str, int]:
        """Apply a step's receipt; returns how many checkpoints it confirmed, by phase (the
        request's: prefill or decode)."""
        confirmed: dict[str, int] = {}
        for (req, ck), ok in zip(entries, written, strict=True):
            if not any(p is ck for p in req.pending_checkpoints):
                continue  # the request left before the receipt: its slot was freed then
            req.pending_checkpoints = [p for p in req.pending_checkpoints if p is not ck]
            if not ok:
                self.checkpoints_unwritten += 1
                self.states.checkpoints.free(ck.slot)
                continue
            confirmed[ck.phase] = confirmed.get(ck.phase, 0) + 1
            if ck.keep:
                self._hold(req.kept_checkpoints, ck.position, ck.slot)
                continue
            if req.checkpoint is not None:
                if self.offers_running and not req.is_decoding:  # prefill goes on: offer_running
                    self._hold(req.kept_checkpoints, *req.checkpoint)
                else:
                    self.states.checkpoints.free(req.checkpoint[1])
            req.checkpoint = (ck.position, ck.slot)
        self.checkpoints_written += sum(confirmed.values())
        return confirmed

    def _hold(self, held: dict[int, int], position: int, slot: int) -> None:
        if position in held:
            self.states.checkpoints.free(held[position])
        held[position] = slot

    def offer_running(self, req: Request, cached_len: int) -> dict[int, int]:
        """The confirmed checkpoints of running ``req`` the cache may take now (position -> slot):
        at or before ``cached_len`` and not read by its next step (``state_source``); they are no
        longer the request's (it writes only its own slot and new checkpoint slots)."""
        offer: dict[int, int] = {}
        for position, slot in list(req.kept_checkpoints.items()):
            if 0 < position <= cached_len and slot != req.state_source:
                offer[position] = slot
                del req.kept_checkpoints[position]
        if req.checkpoint is not None:
            position, slot = req.checkpoint
            if 0 < position <= cached_len and slot != req.state_source and position not in offer:
                offer[position] = slot
                req.checkpoint = None
        return offer

    def release(self, req: Request, cached_len: int) -> dict[int, int]:
        """Free ``req``'s slots; returns the confirmed checkpoints at or before ``cached_len``
        (position -> slot) for the cache to take."""
        offer: dict[int, int] = {}
        held = list(req.kept_checkpoints.items())
        if req.checkpoint is not None:
            held.append(req.checkpoint)
        for position, slot in held:
            if 0 < position <= cached_len and position not in offer:
                offer[position] = slot
            else:
                self.states.checkpoints.free(slot)
        for ck in req.pending_checkpoints:  # written or not, nobody confirmed them
            self.states.checkpoints.free(ck.slot)
        req.pending_checkpoints, req.kept_checkpoints, req.checkpoint = [], {}, None
        req.state_source = None
        if req.state_slot is not None:
            self.states.free(req.state_slot)
            req.state_slot = None
        return offer
