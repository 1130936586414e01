"""The speculator contract passes a toy drafter and fails one whose verify accepts everything."""

from __future__ import annotations

import pytest
import torch

from hinge.contracts import Speculator
from hinge.plugins import SpeculatorCapabilities, SpeculatorSpec
from hinge.testing import SpeculatorContract


class NextTokenDrafter(Speculator):
    """Drafts last+1, last+2, ... (mod vocab); verify keeps the agreeing prefix plus one."""

    def __init__(self, options=None, build=None, k=3, vocab=64):
        self.k, self.vocab = k, vocab
        self.capabilities = SpeculatorCapabilities(max_draft_tokens=k)

    def propose(self, batch):
        last = torch.tensor(batch, dtype=torch.int64)[:, None]
        return (last + torch.arange(1, self.k + 1)[None, :]) % self.vocab

    def verify(self, batch, target_logits):
        drafts = self.propose(batch)
        target = target_logits.argmax(-1)
        accepted = []
        for i in range(drafts.shape[0]):
            n = 0
            while n < self.k and int(drafts[i, n]) == int(target[i, n]):
                n += 1
            accepted.append(drafts[i, :n].tolist() + [int(target[i, n])])
        return accepted


class AcceptsEverything(NextTokenDrafter):
    def verify(self, batch, target_logits):
        drafts = self.propose(batch)
        return [d + [int(t)] for d, t in zip(drafts.tolist(), target_logits.argmax(-1)[:, -1], strict=True)]


SPEC = SpeculatorSpec(name="next-token", factory=NextTokenDrafter,
                      capabilities=SpeculatorCapabilities(max_draft_tokens=3))


class TestNextTokenDrafterPassesTheContract(SpeculatorContract):
    @pytest.fixture
    def spec(self):
        return SPEC

    @pytest.fixture
    def propose_batch(self):
        return [5, 63, 20]


def test_a_verify_that_accepts_everything_fails():
    with pytest.raises(AssertionError):
        SpeculatorContract().test_a_rejected_first_draft_keeps_only_the_target_token(
            AcceptsEverything(), [5, 63, 20])


def test_a_drafter_proposing_more_than_it_claims_fails():
    spec = SPEC.model_copy(update={"capabilities": SpeculatorCapabilities(max_draft_tokens=2)})
    with pytest.raises(AssertionError, match="3 drafts, max_draft_tokens 2"):
        SpeculatorContract().test_proposals_are_int64_within_the_vocab_and_draft_limit(
            spec, NextTokenDrafter(), [1])
