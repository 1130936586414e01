"""The sampler's top-k path (``torch.topk`` candidates, no sort of the vocabulary) against the
full sort: the same kept tokens, weights and draws on rows full of ties, with every filter,
temperature and penalty; and ``kept_weights`` against a per-token float64 recompute."""

from __future__ import annotations

import math

import pytest
import torch

import hinge.engine.sampler as sampler_module
from hinge.engine.request import Request
from hinge.engine.sampler import TIE_MARGIN, Sampler, kept_weights, sample_rows
from hinge.sampling_params import SamplingParams

V = 3000


def _logits(rows: int, seed: int) -> torch.Tensor:
    """bf16-rounded logits (many exact ties among the top tokens), some rows coarser still."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, V, generator=g) * 4).bfloat16().float()
    x[::3] = torch.round(x[::3] * 2) / 2  # half-unit steps: runs of dozens of equal values
    return x


def _filters(rows: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    pick = lambda xs: torch.tensor(xs)[torch.randint(len(xs), (rows,), generator=g)]  # noqa: E731
    return (pick([0.3, 0.7, 1.0, 1.3]).unsqueeze(1), pick([1, 2, 5, 20, 50, 200]),
            pick([1.0, 0.95, 0.8, 0.5, 0.2]), pick([0.0, 0.0, 0.02, 0.1, 0.5]))


def _ref_kept(row: list[float], top_k: int, top_p: float, min_p: float) -> dict[int, float]:
    """Token -> renormalised probability of the tokens a float64 per-token loop keeps (ties
    decided by value)."""
    order = sorted(range(len(row)), key=lambda t: -row[t])
    kth = row[order[min(top_k, len(row)) - 1]]
    keep = [t for t in order if row[t] >= kth]
    m = row[order[0]]
    z = sum(math.exp(row[t] - m) for t in keep)
    prob = {t: math.exp(row[t] - m) / z for t in keep}
    if top_p < 1:  # a value's group is kept when the mass of larger values is below top_p
        keep = [t for t in keep if sum(prob[s] for s in keep if row[s] > row[t]) < top_p]
    keep = [t for t in keep if prob[t] >= min_p * prob[order[0]]]
    return {t: prob[t] / sum(prob[s] for s in keep) for t in keep}


def test_kept_weights_match_a_float64_per_token_recompute_on_rows_with_ties():
    x = _logits(12, 0)[:, :400]
    temperature, top_k, top_p, min_p = _filters(12, 1)
    vals, ids = (x / temperature).sort(dim=-1, descending=True)
    weights = kept_weights(vals, top_k, top_p, min_p)
    for r in range(12):
        row = (x[r] / temperature[r]).tolist()
        ref = _ref_kept(row, int(top_k[r]), float(top_p[r]), float(min_p[r]))
        got = {int(t): float(w) for t, w in zip(ids[r], weights[r], strict=True) if w > 0}
        assert set(got) == set(ref), (r, sorted(set(got) ^ set(ref)))
        total = sum(got.values())
        for t, p in ref.items():
            assert got[t] / total == pytest.approx(p, rel=1e-5), (r, t)


@pytest.mark.parametrize("seed", range(4))
def test_the_topk_path_draws_the_same_token_as_the_full_sort(seed):
    rows = 48
    x = _logits(rows, seed)
    temperature, top_k, top_p, min_p = _filters(rows, 100 + seed)
    for step in range(8):
        seeds, steps = torch.arange(rows) * 7919 + seed, torch.full((rows,), step)
        args = (temperature, top_k, top_p, min_p, seeds, steps)
        full = sample_rows(x, None, *args)
        fast = sample_rows(x, int(top_k.max()) + TIE_MARGIN, *args)
        assert torch.equal(fast, full), (step, (fast != full).nonzero().flatten().tolist())


def test_the_topk_path_keeps_the_same_weights_as_the_full_sort_token_by_token():
    rows = 48
    x = _logits(rows, 9)
    temperature, top_k, top_p, min_p = _filters(rows, 10)
    vals, ids = (x / temperature).sort(dim=-1, descending=True)
    full = torch.zeros(rows, V).scatter_(1, ids, kept_weights(vals, top_k, top_p, min_p))
    vals, ids = (x / temperature).topk(int(top_k.max()) + TIE_MARGIN, dim=-1)
    fast = torch.zeros(rows, V).scatter_(1, ids, kept_weights(vals, top_k, top_p, min_p))
    assert torch.equal(fast, full)


def test_masked_tokens_tied_beyond_the_margin_never_change_the_draw():
    """A grammar leaving 3 tokens and top_k 50: the k-th value is the mask, tied ~V times."""
    x = torch.full((4, V), float("-inf"))
    x[:, [10, 500, 2999]] = torch.tensor([1.0, 0.5, 0.5])
    args = (torch.ones(4, 1), torch.full((4,), 50), torch.tensor([1.0, 0.9, 0.6, 1.0]),
            torch.zeros(4), torch.arange(4), torch.zeros(4, dtype=torch.int64))
    for step in range(30):
        args = (*args[:5], torch.full((4,), step))
        fast = sample_rows(x, 50 + TIE_MARGIN, *args)
        assert torch.equal(fast, sample_rows(x, None, *args))
        assert set(fast.tolist()) <= {10, 500, 2999}


def test_a_finite_tie_run_longer_than_the_margin_keeps_only_the_fetched_candidates():
    """The documented limit: 300 tokens tie at the 5th value; the full sort keeps them all,
    the top-k path the ``5 + TIE_MARGIN`` that topk returned."""
    x = torch.full((1, V), -10.0)
    x[0, :4] = torch.tensor([3.0, 2.0, 1.5, 1.2])
    x[0, 100:400] = 1.0
    top_k, top_p, min_p = torch.tensor([5]), torch.tensor([1.0]), torch.tensor([0.0])
    vals, ids = x.sort(dim=-1, descending=True)
    full = set(ids[0, kept_weights(vals, top_k, top_p, min_p)[0] > 0].tolist())
    vals, ids = x.topk(5 + TIE_MARGIN, dim=-1)
    fast = set(ids[0, kept_weights(vals, top_k, top_p, min_p)[0] > 0].tolist())
    assert len(full) == 304 and len(fast) == 5 + TIE_MARGIN and fast < full


_rows = iter(range(10**9))


def _req(params: SamplingParams, seed: int, output: list[int]) -> Request:
    req = Request(f"r{seed}", [1, 2, 3, 40, 41], params)
    req.output_ids = list(output)
    req.row = next(_rows) % 64 + 1
    req.sample_seed = seed
    return req


def _batch() -> list[Request]:
    g = torch.Generator().manual_seed(5)
    reqs = []
    for i in range(24):
        out = torch.randint(V, (20,), generator=g).tolist()
        reqs.append(_req(SamplingParams(
            temperature=[0.0, 0.6, 1.0, 1.4][i % 4], top_k=[5, 50, 1024, 300][i % 4 - 1],
            top_p=[1.0, 0.9, 0.5][i % 3], min_p=[0.0, 0.05][i % 2],
            repetition_penalty=[1.0, 1.1, 0.8][i % 3], frequency_penalty=[0.0, 0.5][i % 2],
            presence_penalty=[0.0, -0.3, 0.4][i % 3], logit_bias={7: 5.0, 8: -2.0}), 1000 + i, out))
    return reqs


def _draws(deterministic: bool, steps: int = 6) -> list[list[int]]:
    sampler = Sampler(V, "cpu", deterministic=deterministic)
    reqs = _batch()
    out = []
    for step in range(steps):
        tokens = sampler.sample(_logits(len(reqs), 50 + step), sampler.prepare(reqs)).token_ids
        out.append(tokens.tolist())
        for req, t in zip(reqs, out[-1], strict=True):
            req.output_ids.append(t)
    return out


@pytest.mark.parametrize("deterministic", [False, True])
def test_the_sampler_draws_the_same_tokens_with_and_without_the_topk_path(monkeypatch,
                                                                          deterministic):
    """Penalties, logit bias and greedy rows through ``Sampler``; K_MAX 0 forces the full sort."""
    fast = _draws(deterministic)
    monkeypatch.setattr(sampler_module, "K_MAX", 0)
    assert _draws(deterministic) == fast


def test_a_row_draws_the_same_token_alone_and_in_a_batch_on_the_topk_path():
    x = _logits(32, 3)
    temperature, top_k, top_p, min_p = _filters(32, 4)
    seeds, steps = torch.arange(32) + 11, torch.arange(32) % 5
    batch = sample_rows(x, 264, temperature, top_k, top_p, min_p, seeds, steps)
    for r in range(32):
        one = slice(r, r + 1)
        alone = sample_rows(x[one], int(top_k[r]) + TIE_MARGIN, temperature[one], top_k[one],
                            top_p[one], min_p[one], seeds[one], steps[one])
        assert alone.item() == batch[r].item(), r


def test_rows_with_top_k_off_or_above_k_max_take_the_full_sort_and_the_others_topk():
    sampler = Sampler(V, "cpu")
    reqs = [_req(SamplingParams(temperature=1.0, top_k=k), i, []) for i, k in
            enumerate([-1, 20, 0, 2000, 1024, 0])]
    reqs.insert(2, _req(SamplingParams(temperature=0.0), 99, []))
    groups = sampler.prepare(reqs).groups
    assert groups == [([0, 3, 4, 6], None), ([1, 5], 1024 + TIE_MARGIN)]
    # deterministic: every sampled row through the full sort, one group
    assert Sampler(V, "cpu", deterministic=True).prepare(reqs).groups == [([0, 1, 3, 4, 5, 6], None)]
