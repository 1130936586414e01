"""Deterministic sampling on CUDA (run on the GPU machine: ``pytest -m gpu tests/engine``): a
request's logprobs, top logprobs and seeded draws are the same alone and in batches of up to 64
rows, at any row; and the filtered distribution it draws from has the same bits."""

from __future__ import annotations

import pytest
import torch

from hinge.engine.request import Request
from hinge.engine.sampler import Sampler, filtered_probs
from hinge.sampling_params import SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

VOCAB = 151936
#: the issue's sampled setting
SAMPLED = dict(temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1, logprobs=True,
               top_logprobs=5)


def make_request(rid: str, row: int, seed: int) -> Request:
    req = Request(rid, [1, 2, 3, 4], SamplingParams(seed=seed, **SAMPLED))
    req.row = row
    req.sample_seed = seed
    return req


def logits_for(rid_seed: int, step: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(1000 * rid_seed + step)
    return torch.randn(VOCAB, generator=gen, device="cuda") * 3


def run(batch_size: int, position: int, steps: int = 6):
    """The target request (seed 7) at ``position`` among ``batch_size`` rows, over ``steps``."""
    sampler = Sampler(VOCAB, "cuda", deterministic=True)
    seeds = [100 + i for i in range(batch_size)]
    seeds[position] = 7
    reqs = [make_request(f"r{i}", i + 1, s) for i, s in enumerate(seeds)]
    outs = []
    for step in range(steps):
        logits = torch.stack([logits_for(s, step) for s in seeds])
        out = sampler.sample(logits, sampler.prepare(reqs)).tolist()
        outs.append((out.token_ids[position], out.logprobs[position], out.top_logprobs[position]))
        for req, token in zip(reqs, out.token_ids, strict=True):
            req.output_ids.append(token)
    return outs


def test_seeded_draws_and_logprobs_are_the_same_alone_and_in_batches_of_up_to_64():
    alone = run(1, 0)
    for batch_size, position in ((2, 1), (7, 3), (16, 15), (64, 40)):
        assert run(batch_size, position) == alone, (batch_size, position)


def test_the_filtered_distribution_of_a_row_has_the_same_bits_alone_and_in_a_batch():
    rows = torch.stack([logits_for(s, 0) for s in range(64)]) / 0.7
    args = (torch.full((64,), 50, device="cuda"), torch.full((64,), 0.9, device="cuda"),
            torch.zeros(64, device="cuda"))
    full = filtered_probs(rows, *args)
    for n in (1, 2, 17, 64):
        part = filtered_probs(rows[:n], *(a[:n] for a in args))
        assert torch.equal(part, full[:n]), f"a batch of {n} rows filters differently"
    for i in (0, 33):
        alone = filtered_probs(rows[i : i + 1], *(a[i : i + 1] for a in args))
        assert torch.equal(alone[0], full[i]), f"row {i} alone filters differently"
