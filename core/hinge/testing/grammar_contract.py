"""GrammarBackendContract: what a structured-output backend must do for the engine's sampler.

The backend is built by its own factory with the embedded default model's tokenizer. Checked:
each kind it claims compiles; a valid document's tokens are accepted one by one and a stop token
then terminates the matcher; the bitmask allows exactly the tokens ``accept_token`` takes; a
refused token leaves the matcher unchanged; ``rollback`` restores the earlier mask (when
claimed); a bad constraint raises ``hinge.grammar.GrammarError``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hinge.grammar import GrammarError
from hinge.plugins.specs import BuildContext
from hinge.sampling_params import Grammar
from hinge.testing.base import ContractBase

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
          "required": ["a", "b"], "additionalProperties": False}
DOCUMENT = json.dumps({"a": 12, "b": True})
SAMPLES = {"json_schema": json.dumps(SCHEMA), "json_object": "", "regex": r"[0-9]{2}-[a-z]+",
           "ebnf": 'root ::= "yes" | "no"'}


class KitTokenizer:
    """What a grammar backend may read of hinge's Tokenizer: ``backend`` (a ``tokenizers``
    Tokenizer), ``eos_token_ids``, ``encode``, ``decode`` (here the embedded model's files)."""

    def __init__(self) -> None:
        import tokenizers

        from hinge.builtin import default_model_path

        root = default_model_path()
        self.backend = tokenizers.Tokenizer.from_file(str(root / "tokenizer.json"))
        gen = json.loads((root / "generation_config.json").read_text())
        self.eos_token_ids = list(gen["eos_token_id"])
        self.vocab_size = self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)


def mask_row(backend: Any, matcher: Any, vocab_size: int) -> torch.Tensor:
    """The matcher's allowed tokens as a bool ``(vocab_size,)`` tensor."""
    mask = torch.full((1, backend.bitmask_width(vocab_size)), -1, dtype=torch.int32)
    matcher.fill_bitmask(mask, 0)
    bits = (mask.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.reshape(-1)[:vocab_size].bool()


class GrammarBackendContract(ContractBase):
    """Subclass with a ``spec`` fixture returning your GrammarBackendSpec."""

    @pytest.fixture
    def tokenizer(self) -> KitTokenizer:
        return KitTokenizer()

    @pytest.fixture
    def component(self, spec, options, tokenizer) -> Any:
        build = BuildContext(device="cpu", dtype=torch.float32, deterministic=False, page_size=16,
                             model_config=SimpleNamespace(vocab_size=tokenizer.vocab_size),
                             tokenizer=tokenizer)
        return spec.build(spec.validate_options(options), build)

    def test_every_claimed_kind_compiles(self, spec, component):
        for kind in sorted(spec.capabilities.kinds):
            assert component.compile(Grammar(kind, SAMPLES[kind])) is not None, kind

    def test_a_valid_document_is_accepted_token_by_token_then_a_stop_token_terminates(
            self, spec, component, tokenizer):
        if "json_schema" not in spec.capabilities.kinds:
            pytest.skip("json_schema is not claimed")
        matcher = component.matcher(component.compile(Grammar("json_schema", SAMPLES["json_schema"])))
        for token in tokenizer.encode(DOCUMENT):
            assert not matcher.is_terminated()
            assert matcher.accept_token(token), f"token {token} ({tokenizer.decode([token])!r}) refused"
        allowed = mask_row(component, matcher, tokenizer.vocab_size)
        assert allowed.nonzero().flatten().tolist() == sorted(
            t for t in tokenizer.eos_token_ids if t < tokenizer.vocab_size), \
            "after a complete value only stop tokens may be allowed"
        assert matcher.accept_token(tokenizer.eos_token_ids[0]) and matcher.is_terminated()

    def test_the_mask_allows_exactly_the_tokens_accept_token_takes(self, spec, component, tokenizer):
        kind = "regex" if "regex" in spec.capabilities.kinds else sorted(spec.capabilities.kinds)[0]
        matcher = component.matcher(component.compile(Grammar(kind, SAMPLES[kind])))
        allowed = mask_row(component, matcher, tokenizer.vocab_size)
        for token in range(tokenizer.vocab_size):
            took = matcher.accept_token(token)
            assert took == bool(allowed[token]), f"token {token}: mask {bool(allowed[token])}, accept {took}"
            if took:
                if not spec.capabilities.rollback:
                    matcher = component.matcher(component.compile(Grammar(kind, SAMPLES[kind])))
                else:
                    matcher.rollback(1)
        assert allowed.any(), "the start of a constraint allows no token"

    def test_a_refused_token_leaves_the_matcher_unchanged(self, component, tokenizer):
        matcher = component.matcher(component.compile(Grammar("regex", r"[0-9]{2}")))
        before = mask_row(component, matcher, tokenizer.vocab_size)
        refused = int((~before).nonzero()[0])
        assert not matcher.accept_token(refused)
        assert torch.equal(mask_row(component, matcher, tokenizer.vocab_size), before)

    def test_rollback_restores_the_earlier_mask(self, spec, component, tokenizer):
        if not spec.capabilities.rollback:
            pytest.skip("rollback is not claimed")
        matcher = component.matcher(component.compile(Grammar("json_schema", SAMPLES["json_schema"])))
        tokens = tokenizer.encode(DOCUMENT)
        masks = []
        for token in tokens:
            masks.append(mask_row(component, matcher, tokenizer.vocab_size))
            assert matcher.accept_token(token)
        for back in range(len(tokens), 0, -1):
            matcher.rollback(1)
            assert torch.equal(mask_row(component, matcher, tokenizer.vocab_size), masks[back - 1])

    @pytest.mark.parametrize("kind, source", [("regex", "(unclosed"), ("json_schema", "{not json"),
                                              ("ebnf", "root ::= ")])
    def test_a_bad_constraint_raises_grammar_error(self, spec, component, kind, source):
        if kind not in spec.capabilities.kinds:
            pytest.skip(f"{kind} is not claimed")
        with pytest.raises(GrammarError):
            component.compile(Grammar(kind, source))
