"""The sampler's host-made logit edits (logit_bias, stop tokens banned before min_new_tokens,
grammar bitmasks) against hand computations; the logprobs never see them."""

from __future__ import annotations

import torch

from hinge.engine.request import Request
from hinge.engine.sampler import Sampler, unpack_bitmask
from hinge.grammar import GrammarMatcher
from hinge.sampling_params import SamplingParams

V = 40


class AllowOnly(GrammarMatcher):
    """Allows exactly ``allowed``; records what it was asked."""

    def __init__(self, allowed: set[int]) -> None:
        self.allowed = allowed

    def accept_token(self, token_id: int) -> bool:
        return token_id in self.allowed

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        bitmask[row] = 0
        for t in self.allowed:
            bitmask[row, t // 32] |= (1 << (t % 32)) if t % 32 < 31 else -(1 << 31)

    def rollback(self, num_tokens: int) -> None:
        pass

    def is_terminated(self) -> bool:
        return False


def _req(params: SamplingParams, row: int, output=()) -> Request:
    req = Request(f"r{row}", [1, 2, 3], params)
    req.output_ids = list(output)
    req.row = row
    return req


def test_unpack_bitmask_matches_a_bit_loop():
    mask = torch.randint(-2**31, 2**31 - 1, (3, 2), generator=torch.Generator().manual_seed(0),
                         dtype=torch.int64).to(torch.int32)
    got = unpack_bitmask(mask, V)
    for r in range(3):
        for t in range(V):
            word = int(mask[r, t // 32]) & 0xFFFFFFFF
            assert bool(got[r, t]) == bool((word >> (t % 32)) & 1), (r, t)


def test_logit_bias_changes_the_greedy_token_but_not_the_logprobs():
    logits = torch.zeros(2, V)
    logits[:, 7] = 5.0
    sampler = Sampler(V, "cpu")
    reqs = [_req(SamplingParams(temperature=0, logprobs=True, logit_bias={3: 10.0}), 1),
            _req(SamplingParams(temperature=0, logprobs=True), 2)]
    out = sampler.sample(logits, sampler.prepare(reqs)).tolist()
    assert out.token_ids == [3, 7]
    assert out.logprobs[0] == torch.log_softmax(logits[0], -1)[3].item()


def test_stop_tokens_are_banned_until_min_new_tokens():
    logits = torch.zeros(3, V)
    logits[:, 0] = 9.0  # eos is the greedy token
    logits[:, 5] = 8.0  # a stop token id
    sampler = Sampler(V, "cpu", eos_ids=frozenset({0}))
    p = SamplingParams(temperature=0, min_new_tokens=2, stop_token_ids=[5])
    reqs = [_req(p, 1, output=[9]), _req(p, 2, output=[9, 9]),
            _req(SamplingParams(temperature=0, min_new_tokens=2, ignore_eos=True), 3)]
    got = sampler.sample(logits, sampler.prepare(reqs)).tolist().token_ids
    assert got[0] not in (0, 5)  # one token so far: both banned
    assert got[1] == 0  # min_new_tokens reached
    assert got[2] == 0  # ignore_eos: eos is not a stop token, not banned


def test_a_grammar_mask_restricts_greedy_and_sampled_draws():
    logits = torch.randn(2, V, generator=torch.Generator().manual_seed(1))
    sampler = Sampler(V, "cpu")
    allowed = {4, 33, 39}
    reqs = [_req(SamplingParams(temperature=0), 1),
            _req(SamplingParams(temperature=1.0, seed=3), 2)]
    for r in reqs:
        r.grammar = AllowOnly(allowed)
    reqs[1].sample_seed = 3
    for _ in range(20):
        got = sampler.sample(logits, sampler.prepare(reqs)).tolist().token_ids
        assert set(got) <= allowed
    assert got[0] == max(allowed, key=lambda t: logits[0, t].item())
