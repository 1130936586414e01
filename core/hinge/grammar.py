"""The structured-output seam: a grammar backend compiles a constraint, a matcher follows one
request's tokens and says which next tokens the constraint allows.

Plugins register backends with ``register_grammar_backends`` (``hinge.plugins.GrammarBackendSpec``);
xgrammar is built in (``hinge.builtin.xgrammar_backend``). The engine asks the backend for a
matcher when a request with ``SamplingParams.grammar`` arrives; each step the sampler has every
such request's matcher fill its row of a bitmask on the host, copies the mask to the logits'
device and sets the logits of refused tokens to ``-inf`` (outside any captured graph); every
token the request keeps is then fed to ``accept_token``. ``rollback`` undoes accepted tokens
(speculative decoding: drafts are accepted to fill their masks, then rolled back).

Mask layout (xgrammar's): int32 ``(rows, ceil(vocab_size / 32))``; bit ``t % 32`` of word
``t // 32`` set means token ``t`` is allowed. ``vocab_size`` is the model's (the logits' width).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from hinge.sampling_params import Grammar


class GrammarError(ValueError):
    """A constraint the backend cannot compile (bad schema, regex or EBNF); the message names
    the kind and the problem. Answered 400 by the server."""


class GrammarMatcher(ABC):
    """One request's position in its grammar. Not thread safe; used on the engine thread."""

    @abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance past ``token_id``; False (state unchanged) when the grammar refuses it."""

    @abstractmethod
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` (int32, CPU; layout above).
        Does not change the matcher. After a complete value only stop tokens are allowed."""

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (``0 <= num_tokens <=`` accepted)."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """True once a stop token was accepted after a complete value (nothing more allowed)."""


class GrammarBackend(ABC):
    """Compiles constraints for one tokenizer and vocabulary (given at build time through
    ``BuildContext.tokenizer`` and ``BuildContext.model_config.vocab_size``)."""

    #: the ``Grammar.kind`` values it compiles: json_schema, json_object, regex, ebnf
    kinds: frozenset[str] = frozenset()

    @abstractmethod
    def compile(self, grammar: Grammar) -> Any:
        """``grammar`` -> an opaque compiled form (may be cached and shared by requests).
        Raises ``GrammarError`` for a constraint it cannot compile."""

    @abstractmethod
    def matcher(self, compiled: Any) -> GrammarMatcher:
        """A fresh matcher at the start of ``compiled``."""

    def bitmask_width(self, vocab_size: int) -> int:
        """int32 words per mask row."""
        return (vocab_size + 31) // 32
