"""SpeculatorContract: proposal shapes and dtypes, determinism, full acceptance when the target
agrees with every draft, and a rejected first draft keeping only the target's token.

The speculator's batch type belongs to the speculator issue; the author provides it through the
``propose_batch`` fixture and, when their verify expects another logits layout, overrides
``target_logits``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hinge.testing.base import ContractBase


class SpeculatorContract(ContractBase):
    vocab_size = 64

    @pytest.fixture
    def propose_batch(self) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} must provide a `propose_batch` fixture: a batch your "
            "speculator's propose() and verify() accept"
        )

    def target_logits(self, batch: Any, target_tokens: torch.Tensor) -> torch.Tensor:
        """Target logits whose argmax is ``target_tokens`` (B, k+1): default (B, k+1, vocab)."""
        logits = torch.full((*target_tokens.shape, self.vocab_size), -10.0)
        logits.scatter_(-1, target_tokens[..., None].cpu(), 10.0)
        return logits.to(target_tokens.device)

    def test_capabilities_match_the_hidden_layers_it_asks_for(self, spec, component):
        mode = spec.capabilities.hidden_state_mode
        layers = tuple(component.hidden_layer_ids)
        assert bool(layers) == (mode != "none"), (
            f"hidden_state_mode {mode!r} but hidden_layer_ids = {layers}")

    def test_proposals_are_int64_within_the_vocab_and_draft_limit(self, spec, component, propose_batch):
        drafts = component.propose(propose_batch)
        assert drafts.dtype == torch.int64 and drafts.dim() == 2, f"got {drafts.dtype} {tuple(drafts.shape)}"
        assert 1 <= drafts.shape[1] <= spec.capabilities.max_draft_tokens, (
            f"{drafts.shape[1]} drafts, max_draft_tokens {spec.capabilities.max_draft_tokens}")
        assert int(drafts.min()) >= 0 and int(drafts.max()) < self.vocab_size

    def test_proposals_are_deterministic(self, build_component, propose_batch):
        a = build_component().propose(propose_batch)
        b = build_component().propose(propose_batch)
        assert torch.equal(a, b), "two fresh speculators proposed different drafts for one batch"

    def test_drafts_the_target_agrees_with_are_all_accepted(self, component, propose_batch):
        drafts = component.propose(propose_batch)
        bonus = torch.arange(drafts.shape[0], device=drafts.device)[:, None] % self.vocab_size
        target = torch.cat([drafts, bonus], dim=1)
        accepted = component.verify(propose_batch, self.target_logits(propose_batch, target))
        assert [list(a) for a in accepted] == target.tolist(), "agreeing drafts were not all accepted"

    def test_a_rejected_first_draft_keeps_only_the_target_token(self, component, propose_batch):
        drafts = component.propose(propose_batch)
        target = torch.cat([drafts, drafts[:, :1]], dim=1).clone()
        target[:, 0] = (drafts[:, 0] + 1) % self.vocab_size
        accepted = component.verify(propose_batch, self.target_logits(propose_batch, target))
        assert [list(a) for a in accepted] == target[:, :1].tolist()
