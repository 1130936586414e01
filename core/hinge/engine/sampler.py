"""Token sampling: penalties, temperature, top-k, top-p, min-p, per-request seeds, logprobs.

Order (vLLM's): repetition/frequency/presence penalties on the model logits, then the host-made
edits (``LogitEdits``: ``logit_bias``, stop tokens masked before ``min_new_tokens``, grammar
masks), then greedy argmax (temperature 0 or top_k 1) or temperature, then top-k, top-p and
min-p masks, then a draw from the kept tokens' weights keyed by the request's seed and how many
tokens it has drawn (``hinge.engine.draw``: one batched exponential race, no generator state).

Sampled rows whose ``top_k`` is at most ``K_MAX`` take the top-k path: ``torch.topk`` of
``top_k + TIE_MARGIN`` candidates per row instead of sorting the vocabulary, and the filters and
the race run on those candidates only (the race's noise is per token id, so it is the full
path's). The filters (``kept_weights``) decide by value and sum in exact integers, so both paths
keep the same tokens with the same weights and draw the same token; they differ only when more
than ``TIE_MARGIN`` tokens beyond the k-th tie with it at a non-zero weight (the full path keeps
them all, the top-k path those ``topk`` returned).

Grammar masks (structured outputs, ``hinge.grammar``) are filled on the host by each request's
matcher in ``prepare`` (one int32 bitmask row per constrained request), copied to the logits'
device and applied here, in the eager sampler, after the forward: never inside a captured graph.

Returned logprobs are ``log_softmax`` of the **raw model logits** (before penalties, temperature
and masks; in default mode computed as ``x - logsumexp(x)`` for the returned tokens only), the
convention of vLLM's default ``raw_logprobs`` and of sglang. Every operation is row-wise, the filters' only reductions are exact (max, integer sums) and the draw's noise is a
function of (seed, position, token id), so a row's result does not depend on the other rows; with ``deterministic`` the log-softmax is ``hinge.layers.batch_invariant``'s (one
Triton program per row on CUDA, fixed 16-row blocks on CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hinge.devices import to_device, to_device_all
from hinge.engine.draw import draw, row_keys_host
from hinge.layers import batch_invariant, fast_triton

if TYPE_CHECKING:
    from hinge.engine.request import Request

#: sampled rows with ``0 < top_k <= K_MAX`` draw from ``torch.topk`` candidates, not a full sort
K_MAX = 1024
#: candidates fetched past a row's k-th, so ties at the k-th value are kept (module docstring)
TIE_MARGIN = 64
#: fixed-point scale of the filters' exact integer sums (vocabularies below 2**23 cannot overflow)
_FIXED = float(2**40)


@dataclass
class SamplingArgs:
    """Arguments of one step, built once by ``prepare`` (small host lists -> device tensors)."""

    #: (B, 1) float32, 1 for greedy rows; these four are None when every row is greedy
    temperature: torch.Tensor | None
    top_k: torch.Tensor | None  #: (B,) int64, vocab size when off
    top_p: torch.Tensor | None  #: (B,) float32
    min_p: torch.Tensor | None  #: (B,) float32
    greedy: list[bool]
    #: (B,) int64 noise keys of the per-request seeds and draws so far (``Request.sample_seed``,
    #: ``num_generated``): ``draw.row_keys_host``, computed on the host and uploaded once
    keys: torch.Tensor | None
    #: (seen, counts, repetition, frequency, presence) of the ``penalty_rows``, or None without
    #: penalties; seen is None when no row has a repetition penalty, counts when none has a
    #: frequency or presence penalty
    penalties: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, torch.Tensor,
                     torch.Tensor] | None
    num_top_logprobs: int
    need_logprobs: bool
    #: (B,) int64 device-table rows (``Request.row``) and which batch rows keep penalty counts
    rows: torch.Tensor | None = None
    penalty_rows: torch.Tensor | None = None
    #: on CUDA (``penalty_kernel``): (table rows (P,) int64, which (B,) int32) and ``penalties``
    #: holds the whole seen/counts tables, read in place by one kernel; None: the torch path
    penalty_tables: tuple[torch.Tensor, torch.Tensor] | None = None
    #: bias, banned stop tokens and grammar masks of the sampling logits, or None
    edits: LogitEdits | None = None
    #: groups of sampled batch rows drawn together: (rows, candidates per row for the top-k
    #: path, or None for a sort of the whole vocabulary)
    groups: list[tuple[list[int], int | None]] | None = None


@dataclass
class LogitEdits:
    """One step's host-made changes to the sampling logits (the logprobs never see them)."""

    #: (batch rows, token ids, values) added to the logits: ``logit_bias``
    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    #: (batch rows, token ids) set to -inf: stop tokens of requests short of ``min_new_tokens``
    banned: tuple[torch.Tensor, torch.Tensor] | None = None
    grammar_rows: torch.Tensor | None = None  #: (G,) int64 batch rows with a grammar
    grammar_mask: torch.Tensor | None = None  #: (G, ceil(V / 32)) int32 bitmask, on the device

    def apply(self, logits: torch.Tensor, copy: bool = True) -> torch.Tensor:
        """``logits`` (B, V) with the edits made: a copy, or ``logits`` itself (``copy`` False:
        the caller's own temporary)."""
        x = logits.clone() if copy else logits
        if self.bias is not None:
            rows, cols, values = self.bias
            x.index_put_((rows, cols), values, accumulate=True)
        if self.banned is not None:
            x.index_put_(self.banned, torch.tensor(float("-inf"), device=x.device))
        if self.grammar_rows is not None:
            allowed = unpack_bitmask(self.grammar_mask, x.shape[1])
            rows = self.grammar_rows
            x[rows] = x[rows].masked_fill(~allowed, float("-inf"))
        return x


def unpack_bitmask(mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 ``(G, W)`` bitmask (bit ``t % 32`` of word ``t // 32``) -> bool ``(G, vocab_size)``."""
    shifts = torch.arange(32, dtype=torch.int32, device=mask.device)
    bits = (mask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(mask.shape[0], -1)[:, :vocab_size].bool()


@dataclass
class SampledTokens:
    """One step's draws, still on the device (the engine copies them to the host in one go)."""

    token_ids: torch.Tensor  #: (B,) int64
    logprobs: torch.Tensor | None  #: (B,) float32, of the sampled token, raw logits
    top_ids: torch.Tensor | None  #: (B, K) int64
    top_logprobs: torch.Tensor | None  #: (B, K) float32

    def tolist(self) -> SampleOutput:
        """Host lists (one device sync): tests and callers outside the engine loop."""
        top = None
        if self.top_ids is not None:
            top = [list(zip(i, v, strict=True)) for i, v in zip(self.top_ids.tolist(),
                                                                  self.top_logprobs.tolist(), strict=True)]
        return SampleOutput(self.token_ids.tolist(),
                            self.logprobs.tolist() if self.logprobs is not None else None, top)


@dataclass
class SampleOutput:
    token_ids: list[int]
    logprobs: list[float] | None  #: of the sampled token, raw logits
    top_logprobs: list[list[tuple[int, float]]] | None


class PenaltyCounts:
    """Per device-table row: which tokens the request has seen (prompt + output, for the
    repetition penalty) and how often it produced each (frequency and presence penalties). Rows
    are filled from the host once when a request takes the row, then counted on the device."""

    def __init__(self, num_rows: int, vocab_size: int, device: torch.device) -> None:
        self.seen = torch.zeros(num_rows, vocab_size, dtype=torch.bool, device=device)
        self.counts = torch.zeros(num_rows, vocab_size, dtype=torch.float32, device=device)
        self.owner: list[Request | None] = [None] * num_rows

    def ensure(self, req: Request) -> None:
        row = req.row
        if self.owner[row] is req:
            return
        self.owner[row] = req
        device = self.seen.device
        self.seen[row] = False
        self.counts[row] = 0
        ids = req.all_ids
        if ids:
            self.seen[row, to_device(ids, torch.int64, device)] = True
        if req.output_ids:
            out = to_device(req.output_ids, torch.int64, device)
            self.counts[row].index_add_(0, out, torch.ones(len(req.output_ids), device=device))

    def add(self, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        # NOTE: a same-device value, not ``seen[rows, tokens] = True``: the Python scalar made that
        # a synchronizing copy, one device wait per sampled decode step (tools/gpu/sync_points.py)
        self.seen.index_put_((rows, tokens), torch.ones_like(tokens, dtype=torch.bool))
        self.counts.index_put_((rows, tokens), torch.ones_like(tokens, dtype=torch.float32),
                               accumulate=True)


class Sampler:
    def __init__(self, vocab_size: int, device: str | torch.device, deterministic: bool = False,
                 max_rows: int = 65, eos_ids: frozenset[int] = frozenset()):
        self.vocab_size = vocab_size
        self.eos_ids = eos_ids  #: masked with the stop token ids before ``min_new_tokens``
        self.device = torch.device(device)
        self.deterministic = deterministic
        self.max_rows = max_rows
        self.counts: PenaltyCounts | None = None  #: allocated when a request first uses penalties

    def prepare(self, reqs: list[Request]) -> SamplingArgs:
        ps = [r.params for r in reqs]
        greedy = [p.is_greedy for p in ps]
        # NOTE: every per-row list of the step goes to the device in one staged copy
        # (``to_device_all``), not one pinned copy each
        lists: dict[str, tuple[list, torch.dtype]] = {}
        if reqs[0].row is not None:
            lists["rows"] = ([r.row for r in reqs], torch.int64)
        users = self._penalty_lists(reqs, lists)
        if not all(greedy):
            temps = [1.0 if g else p.temperature for p, g in zip(ps, greedy, strict=True)]
            top_k = [p.top_k if p.top_k > 0 else self.vocab_size for p in ps]
            keys = row_keys_host([r.sample_seed or 0 for r in reqs], [r.num_generated for r in reqs])
            lists.update(temperature=(temps, torch.float32), top_k=(top_k, torch.int64),
                         top_p=([p.top_p for p in ps], torch.float32),
                         min_p=([p.min_p for p in ps], torch.float32), keys=(keys, torch.int64))
        dev = to_device_all(lists, self.device)
        penalties, penalty_rows, penalty_tables = self._penalty_args(reqs, users, dev)
        common = dict(greedy=greedy, penalties=penalties, rows=dev.get("rows"),
                      penalty_rows=penalty_rows, penalty_tables=penalty_tables,
                      num_top_logprobs=max((p.top_logprobs for p in ps), default=0),
                      need_logprobs=any(p.logprobs or p.top_logprobs for p in ps),
                      edits=self._prepare_edits(reqs))
        if all(greedy):  # greedy fast path: no per-row sampling tensors to build or copy
            return SamplingArgs(temperature=None, top_k=None, top_p=None, min_p=None,
                                keys=None, **common)
        return SamplingArgs(
            groups=self._groups([i for i, g in enumerate(greedy) if not g], lists["top_k"][0]),
            temperature=dev["temperature"].unsqueeze(1), top_k=dev["top_k"], top_p=dev["top_p"],
            min_p=dev["min_p"], keys=dev["keys"], **common)

    def _groups(self, sampled: list[int], top_k: list[int]) -> list[tuple[list[int], int | None]]:
        """Sampled rows with ``top_k <= K_MAX`` in one top-k group, the others in one full group;
        with ``deterministic`` every sampled row in one full group (see ``sample``)."""
        def candidates(k: int) -> int | None:
            return min(k + TIE_MARGIN, self.vocab_size) if k <= K_MAX else None

        if self.deterministic:
            return [(list(sampled), None)] if sampled else []
        fast = [i for i in sampled if top_k[i] <= K_MAX]
        full = [i for i in sampled if top_k[i] > K_MAX]
        groups = [(full, None)] if full else []
        return groups + ([(fast, candidates(max(top_k[i] for i in fast)))] if fast else [])

    def _penalty_lists(self, reqs: list[Request], lists: dict) -> list[int]:
        """The penalised batch rows (returned), their tables filled (``PenaltyCounts.ensure``),
        and the host lists their arguments need added to ``lists``."""
        users = [i for i, r in enumerate(reqs) if r.params.has_penalties]
        if not users:
            return users
        assert "rows" in lists, "penalties need each request's device-table row (Request.row)"
        if self.counts is None:
            self.counts = PenaltyCounts(self.max_rows, self.vocab_size, self.device)
        for i in users:
            self.counts.ensure(reqs[i])
        ps = [reqs[i].params for i in users]
        which = [-1] * len(reqs)
        for j, i in enumerate(users):
            which[i] = j
        lists.update(penalty_rows=(users, torch.int64),
                     table_rows=([reqs[i].row for i in users], torch.int64),
                     which=(which, torch.int32),
                     repetition=([p.repetition_penalty for p in ps], torch.float32),
                     frequency=([p.frequency_penalty for p in ps], torch.float32),
                     presence=([p.presence_penalty for p in ps], torch.float32))
        return users

    def _penalty_args(self, reqs: list[Request], users: list[int], dev: dict[str, torch.Tensor]):
        """(penalties, penalty_rows, penalty_tables) of ``SamplingArgs`` from the sent lists."""
        if not users:
            return None, None, None
        ps = [reqs[i].params for i in users]
        use_seen = any(p.repetition_penalty != 1 for p in ps)
        use_counts = any(p.frequency_penalty != 0 or p.presence_penalty != 0 for p in ps)
        params = tuple(dev[name].unsqueeze(1) for name in ("repetition", "frequency", "presence"))
        table_rows = dev["table_rows"]
        # elementwise, so invariant: any mode may read the tables in place (penalty_kernel)
        if fast_triton.enabled(self.counts.seen, self.deterministic, invariant=True):
            tables = (self.counts.seen if use_seen else None,
                      self.counts.counts if use_counts else None)
            return (*tables, *params), dev["penalty_rows"], (table_rows, dev["which"])
        # NOTE: only the tables a penalty reads: each is a (rows, vocab) gather
        seen = self.counts.seen.index_select(0, table_rows) if use_seen else None
        counts = self.counts.counts.index_select(0, table_rows) if use_counts else None
        return (seen, counts, *params), dev["penalty_rows"], None

    def _prepare_edits(self, reqs: list[Request]) -> LogitEdits | None:
        """Bias, min_new_tokens bans and grammar masks of this step's rows (host lists, one copy
        each), or None when no request has any."""
        bias_r: list[int] = []
        bias_c: list[int] = []
        bias_v: list[float] = []
        ban_r: list[int] = []
        ban_c: list[int] = []
        grammar: list[tuple[int, object]] = []
        for i, req in enumerate(reqs):
            p = req.params
            if p.logit_bias:
                bias_r += [i] * len(p.logit_bias)
                bias_c += list(p.logit_bias)
                bias_v += list(p.logit_bias.values())
            matcher = getattr(req, "grammar", None)
            if matcher is not None and not matcher.is_terminated():
                grammar.append((i, matcher))
            elif p.min_new_tokens and req.num_generated < p.min_new_tokens:
                stops = set(p.stop_token_ids) | (set() if p.ignore_eos else set(self.eos_ids))
                stops = sorted(t for t in stops if t < self.vocab_size)
                ban_r += [i] * len(stops)
                ban_c += stops
        if not (bias_r or ban_r or grammar):
            return None
        edits = LogitEdits()
        dev = self.device
        if bias_r:
            edits.bias = (to_device(bias_r, torch.int64, dev), to_device(bias_c, torch.int64, dev),
                          to_device(bias_v, torch.float32, dev))
        if ban_r:
            edits.banned = (to_device(ban_r, torch.int64, dev), to_device(ban_c, torch.int64, dev))
        if grammar:
            mask = torch.full((len(grammar), (self.vocab_size + 31) // 32), -1, dtype=torch.int32)
            for j, (_, matcher) in enumerate(grammar):
                matcher.fill_bitmask(mask, j)
            edits.grammar_rows = to_device([i for i, _ in grammar], torch.int64, dev)
            edits.grammar_mask = mask.to(dev)
        return edits

    def log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if self.deterministic:
            return batch_invariant.log_softmax(logits)
        return torch.log_softmax(logits, dim=-1)

    def sample(self, logits: torch.Tensor, args: SamplingArgs) -> SampledTokens:
        """``logits`` (B, vocab) raw model logits -> one token per row, on the device.

        Also counts the drawn tokens for the requests with penalties (so the next step sees them
        without the host) and writes nothing else; no device sync."""
        raw = logits.float()  # NOTE: no copy: the model's logits are float32
        x = raw
        if args.penalties is not None:
            x = self._penalise(x, args)
        if args.edits is not None:
            x = args.edits.apply(x, copy=x is raw)
        if all(not g for g in args.greedy):
            tokens = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
        else:
            tokens = x.max(dim=-1).indices  # NOTE: first maximum, like argmax, but faster on CPU
        # NOTE: with ``deterministic`` every sampled row takes the full sort, in one group: a row
        # then keeps all of its tokens, the filters decide by value and the race by token id, so
        # the order a CUDA sort gives tied values (its algorithm may depend on the batch) never
        # matters and a row draws what it draws alone. (The top-k path's candidate count follows
        # the group's largest top_k: past TIE_MARGIN ties at a row's k-th value, its kept set
        # could depend on the batch.) One batched sort, not one top-k per row: with a group per
        # row, sampled decode at batch 64 took 15.8 ms a step more than greedy on the H200
        # (docs/benchmarks.md, run b; default mode's one batched sort then: 4.4 ms).
        for rows, candidates in args.groups or []:
            sel = _rows(rows, x.device)
            tokens[sel] = sample_rows(x[sel], candidates, args.temperature[sel], args.top_k[sel],
                                      args.top_p[sel], args.min_p[sel], None, None,
                                      keys=args.keys[sel])
        if args.penalty_tables is not None:  # the tables' update in one launch (CUDA)
            from hinge.engine.penalty_kernel import count_tokens

            count_tokens(self.counts.seen, self.counts.counts, args.penalty_tables[0],
                         args.penalty_rows, tokens)
        elif args.penalty_rows is not None:
            self.counts.add(args.rows.index_select(0, args.penalty_rows),
                            tokens.index_select(0, args.penalty_rows))
        if not args.need_logprobs:
            return SampledTokens(tokens, None, None, None)
        # NOTE: default mode takes the few logprobs it returns as ``x - logsumexp(x)``: one read of
        # the logits, where ``log_softmax`` also wrote a (B, V) float32 copy (58 us a step at batch
        # 64 on the H200); the same values to float32 rounding. Deterministic mode keeps the
        # batch-invariant log-softmax (``shift`` None: its values are the logprobs already).
        scores = self.log_softmax(raw) if self.deterministic else raw
        shift = None if self.deterministic else torch.logsumexp(raw, dim=-1, keepdim=True)

        def logprobs_of(values: torch.Tensor) -> torch.Tensor:
            return values if shift is None else values - shift

        chosen = logprobs_of(scores.gather(1, tokens.unsqueeze(1))).squeeze(1)
        if args.num_top_logprobs > 0:
            vals, ids = scores.topk(args.num_top_logprobs, dim=-1)
            return SampledTokens(tokens, chosen, ids, logprobs_of(vals))
        return SampledTokens(tokens, chosen, None, None)

    def _penalise(self, x: torch.Tensor, args: SamplingArgs) -> torch.Tensor:
        """``x`` with the penalties of ``args.penalty_rows`` (a copy; only those rows computed)."""
        if args.penalty_tables is not None:  # one kernel over the tables in place (CUDA)
            from hinge.engine.penalty_kernel import penalise_rows

            return penalise_rows(x.contiguous(), *args.penalties[:2], *args.penalty_tables,
                                 *args.penalties[2:])
        if args.penalties[2].shape[0] == x.shape[0]:
            return apply_penalties(x, *args.penalties)
        rows = args.penalty_rows
        return x.index_copy(0, rows, apply_penalties(x.index_select(0, rows), *args.penalties))


def _rows(rows: list[int], device: torch.device) -> slice | torch.Tensor:
    """An index of batch rows ``rows``: a slice (a view, no gather) when they are consecutive."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return to_device(rows, torch.int64, device)


def apply_penalties(logits, seen, counts, repetition, frequency, presence) -> torch.Tensor:
    """HF-style repetition penalty over prompt + output, OpenAI frequency/presence over output.

    ``seen`` None skips the repetition penalty, ``counts`` None the other two. An overflow
    (a tiny repetition penalty) stays +-inf here: greedy takes it as the maximum and the
    sampled path clamps after the temperature (``finite``); frequency and presence penalties
    are at most 2 in size, so no inf - inf."""
    out = logits
    if seen is not None:
        penalised = torch.where(logits > 0, logits / repetition, logits * repetition)
        out = torch.where(seen, penalised, logits)
    if counts is not None:
        out = out - frequency * counts - presence * (counts > 0).float()
    return out


def finite(logits: torch.Tensor) -> torch.Tensor:
    """Clamp overflowed logits (a tiny penalty or temperature divides them) to the largest
    finite float, so the softmax that follows stays a distribution instead of NaN."""
    big = torch.finfo(logits.dtype).max
    return logits.clamp(min=-big, max=big)


def sample_rows(logits: torch.Tensor, candidates: int | None, temperature: torch.Tensor,
                top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
                seeds: torch.Tensor | None, steps: torch.Tensor | None, *,
                keys: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) int64 tokens drawn from ``logits`` (B, V) at ``temperature`` (B, 1) with the
    top-k / top-p / min-p filters (``kept_weights``) and the seeded race (``hinge.engine.draw``).

    ``candidates`` C: only the C largest logits of each row take part (``torch.topk``, no sort
    of the vocabulary); the caller makes C at least every row's top_k, plus ``TIE_MARGIN``.
    None: the whole vocabulary, sorted. Temperature and the overflow clamp are monotone, so they
    run on the sorted values only. The noise is keyed by ``(seeds, steps)``, or by their ``keys``
    when given (``draw.row_keys_host``)."""
    if candidates is None:
        vals, ids = logits.sort(dim=-1, descending=True)
    else:
        vals, ids = logits.topk(candidates, dim=-1)
    vals = finite(vals / temperature)
    return draw(kept_weights(vals, top_k, top_p, min_p), seeds, steps, ids, keys=keys)


def kept_weights(vals: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 min_p: torch.Tensor) -> torch.Tensor:
    """(B, C) float32 weights ``exp(v - max)`` of the tokens each row keeps, 0 for the others.

    ``vals`` (B, C) holds each row's largest logits (all V, or a top-k prefix), sorted
    descending. top-k keeps the values >= the k-th (ties at the k-th value kept); top-p keeps the
    most likely tokens until their mass reaches ``top_p`` of the top-k mass, the token that
    crosses it and every token tied with it included; min-p drops tokens whose probability is
    below ``min_p`` times the row's largest. Every decision is by value, so the order of tied
    values never matters, and the masses are sums of the weights in 2**-40 fixed point (exact
    int64), so a row's kept set and weights are the same bits for any C that holds all of its
    top-k tokens, in any batch, on any device.
    """
    width = vals.shape[1]
    kth = vals.gather(1, (top_k - 1).clamp(max=width - 1).unsqueeze(1))
    weights = torch.exp(vals - vals[:, :1]).masked_fill(vals < kth, 0.0)
    fixed = (weights * _FIXED).to(torch.int64)  # NOTE: exact scaling (a power of 2), truncated
    mass = fixed.cumsum(dim=-1)
    need = torch.ceil(top_p.double() * mass[:, -1].double()).to(torch.int64)  # (B,)
    crossing = ((mass - fixed) < need.unsqueeze(1)).sum(dim=-1, keepdim=True).clamp(min=1)
    cut = torch.where((top_p < 1).unsqueeze(1), vals.gather(1, crossing - 1), kth)
    keep = (vals >= cut) & (weights >= min_p.unsqueeze(1))
    return weights.masked_fill(~keep, 0.0)


def filtered_probs(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` (B, V) restricted to each row's top-k, top-p and min-p set
    (``kept_weights`` normalised, in token-id order): the distribution ``sample_rows`` draws
    from."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    weights = kept_weights(sorted_logits, top_k, top_p, min_p)
    probs = weights / weights.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter_(1, order, probs)
