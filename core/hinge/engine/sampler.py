"""Token sampling: penalties, temperature, top-k, top-p, min-p, per-request seeds, logprobs.

Order (vLLM's): repetition/frequency/presence penalties on the model logits, then the host-made
edits (``LogitEdits``: ``logit_bias``, stop tokens masked before ``min_new_tokens``, grammar
masks), then greedy argmax (temperature 0 or top_k 1) or temperature, then top-k, top-p and
min-p masks, then a draw from the renormalised distribution keyed by the request's seed and
how many tokens it has drawn (``hinge.engine.draw``: one batched exponential race, no generator
state).

Grammar masks (structured outputs, ``hinge.grammar``) are filled on the host by each request's
matcher in ``prepare`` (one int32 bitmask row per constrained request), copied to the logits'
device and applied here, in the eager sampler, after the forward: never inside a captured graph.

Returned logprobs are ``log_softmax`` of the **raw model logits** (before penalties, temperature
and masks), the convention of vLLM's default ``raw_logprobs`` and of sglang. Every operation is
row-wise and the draw's noise is a function of (seed, position, token id), so a row's result
does not depend on the other rows; with ``deterministic`` the log-softmax is ``hinge.layers.batch_invariant``'s (one
Triton program per row on CUDA, fixed 16-row blocks on CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hinge.devices import to_device
from hinge.engine.draw import draw
from hinge.layers import batch_invariant

if TYPE_CHECKING:
    from hinge.engine.request import Request


@dataclass
class SamplingArgs:
    """Arguments of one step, built once by ``prepare`` (small host lists -> device tensors)."""

    #: (B, 1) float32, 1 for greedy rows; these four are None when every row is greedy
    temperature: torch.Tensor | None
    top_k: torch.Tensor | None  #: (B,) int64, vocab size when off
    top_p: torch.Tensor | None  #: (B,) float32
    min_p: torch.Tensor | None  #: (B,) float32
    greedy: list[bool]
    #: (B,) int64 per-request seeds and draws so far (``Request.sample_seed``, ``num_generated``)
    seeds: torch.Tensor | None
    steps: torch.Tensor | None
    #: (seen, counts, repetition, frequency, presence) of the batch rows, or None without penalties
    penalties: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None
    num_top_logprobs: int
    need_logprobs: bool
    #: (B,) int64 device-table rows (``Request.row``) and which batch rows keep penalty counts
    rows: torch.Tensor | None = None
    penalty_rows: torch.Tensor | None = None
    #: bias, banned stop tokens and grammar masks of the sampling logits, or None
    edits: LogitEdits | None = None


@dataclass
class LogitEdits:
    """One step's host-made changes to the sampling logits (the logprobs never see them)."""

    #: (batch rows, token ids, values) added to the logits: ``logit_bias``
    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    #: (batch rows, token ids) set to -inf: stop tokens of requests short of ``min_new_tokens``
    banned: tuple[torch.Tensor, torch.Tensor] | None = None
    grammar_rows: torch.Tensor | None = None  #: (G,) int64 batch rows with a grammar
    grammar_mask: torch.Tensor | None = None  #: (G, ceil(V / 32)) int32 bitmask, on the device

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """A copy of ``logits`` (B, V) with the edits made."""
        x = logits.clone()
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
        self.seen[rows, tokens] = True
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
        rows = to_device([r.row for r in reqs], torch.int64, self.device) if reqs[0].row is not None else None
        penalties, penalty_rows = self._prepare_penalties(reqs, rows)
        common = dict(greedy=greedy, penalties=penalties, rows=rows, penalty_rows=penalty_rows,
                      num_top_logprobs=max((p.top_logprobs for p in ps), default=0),
                      need_logprobs=any(p.logprobs or p.top_logprobs for p in ps),
                      edits=self._prepare_edits(reqs))
        if all(greedy):  # greedy fast path: no per-row sampling tensors to build or copy
            return SamplingArgs(temperature=None, top_k=None, top_p=None, min_p=None,
                                seeds=None, steps=None, **common)
        temps = [1.0 if g else p.temperature for p, g in zip(ps, greedy, strict=True)]
        top_k = [p.top_k if p.top_k > 0 else self.vocab_size for p in ps]
        return SamplingArgs(
            temperature=to_device(temps, torch.float32, self.device).unsqueeze(1),
            top_k=to_device(top_k, torch.int64, self.device),
            top_p=to_device([p.top_p for p in ps], torch.float32, self.device),
            min_p=to_device([p.min_p for p in ps], torch.float32, self.device),
            seeds=to_device([r.sample_seed or 0 for r in reqs], torch.int64, self.device),
            steps=to_device([r.num_generated for r in reqs], torch.int64, self.device),
            **common,
        )

    def _prepare_penalties(self, reqs: list[Request], rows: torch.Tensor | None):
        users = [i for i, r in enumerate(reqs) if r.params.has_penalties]
        if not users:
            return None, None
        assert rows is not None, "penalties need each request's device-table row (Request.row)"
        if self.counts is None:
            self.counts = PenaltyCounts(self.max_rows, self.vocab_size, self.device)
        for i in users:
            self.counts.ensure(reqs[i])
        ps = [r.params for r in reqs]
        col = lambda xs: to_device(xs, torch.float32, self.device).unsqueeze(1)  # noqa: E731
        penalties = (self.counts.seen.index_select(0, rows), self.counts.counts.index_select(0, rows),
                     col([p.repetition_penalty for p in ps]), col([p.frequency_penalty for p in ps]),
                     col([p.presence_penalty for p in ps]))
        return penalties, to_device(users, torch.int64, self.device)

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
        raw = logits.float()
        x = apply_penalties(raw, *args.penalties) if args.penalties is not None else raw
        if args.edits is not None:
            x = args.edits.apply(x)
        tokens = x.max(dim=-1).indices  # NOTE: first maximum, like argmax, but faster on CPU
        sampled_rows = [i for i, g in enumerate(args.greedy) if not g]
        if sampled_rows:
            idx = to_device(sampled_rows, torch.int64, x.device)
            scaled = finite(x[idx] / args.temperature[idx])
            if self.deterministic:  # NOTE: one row at a time: the scan and sum of top-p then
                probs = torch.cat([  # reduce the same way whatever the batch (CUDA's differ)
                    filtered_probs(scaled[j:j + 1], args.top_k[i:i + 1], args.top_p[i:i + 1],
                                   args.min_p[i:i + 1]) for j, i in enumerate(sampled_rows)])
            else:
                probs = filtered_probs(scaled, args.top_k[idx], args.top_p[idx], args.min_p[idx])
            tokens.index_copy_(0, idx, draw(probs, args.seeds[idx], args.steps[idx]))
        if args.penalty_rows is not None:
            self.counts.add(args.rows.index_select(0, args.penalty_rows),
                            tokens.index_select(0, args.penalty_rows))
        if not args.need_logprobs:
            return SampledTokens(tokens, None, None, None)
        logprobs = self.log_softmax(raw)
        chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
        if args.num_top_logprobs > 0:
            vals, ids = logprobs.topk(args.num_top_logprobs, dim=-1)
            return SampledTokens(tokens, chosen, ids, vals)
        return SampledTokens(tokens, chosen, None, None)


def apply_penalties(logits, seen, counts, repetition, frequency, presence) -> torch.Tensor:
    """HF-style repetition penalty over prompt + output, OpenAI frequency/presence over output."""
    penalised = torch.where(logits > 0, logits / repetition, logits * repetition)
    out = torch.where(seen, penalised, logits)
    return finite(out - frequency * counts - presence * (counts > 0).float())


def finite(logits: torch.Tensor) -> torch.Tensor:
    """Clamp overflowed logits (a tiny penalty or temperature divides them) to the largest
    finite float, so the softmax that follows stays a distribution instead of NaN."""
    big = torch.finfo(logits.dtype).max
    return logits.clamp(min=-big, max=big)


def filtered_probs(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` (B, V) restricted to each row's top-k, top-p and min-p set.

    top-k keeps the k largest (ties at the k-th value kept); top-p keeps the most likely tokens
    until their mass reaches ``top_p`` (the token that crosses it included); min-p drops tokens
    whose probability is below ``min_p`` times the row's largest.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    kth = sorted_logits.gather(1, (top_k - 1).clamp(max=logits.shape[1] - 1).unsqueeze(1))
    sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop = (mass_before >= top_p.unsqueeze(1)) & (top_p < 1).unsqueeze(1)
    drop |= probs < min_p.unsqueeze(1) * probs[:, :1]
    drop[:, 0] = False
    probs = probs.masked_fill(drop, 0.0)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter_(1, order, probs)
