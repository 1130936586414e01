"""The built-in grammar backend: xgrammar (runs on CPU; masks are made on the host).

JSON schemas compile with ``any_whitespace=False`` by default (option ``any_whitespace``): a
small model given free whitespace inside JSON may never stop writing it. Compiled grammars are
cached by xgrammar's compiler. xgrammar is imported when the backend is built, never before.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from hinge.grammar import GrammarBackend, GrammarError, GrammarMatcher

if TYPE_CHECKING:
    import torch

    from hinge.plugins.specs import BuildContext
    from hinge.sampling_params import Grammar


class XGrammarOptions(BaseModel):
    """Options of the ``xgrammar`` grammar backend (``grammar_backend_options``)."""

    model_config = ConfigDict(extra="forbid")

    any_whitespace: bool = Field(False, description="let JSON output put any whitespace between "
                                 "tokens (True), or none beyond the separators (False)")
    max_threads: int = Field(2, ge=1, le=64, description="compiler threads")


class XGrammarMatcher(GrammarMatcher):
    def __init__(self, matcher: Any) -> None:
        self._m = matcher

    def accept_token(self, token_id: int) -> bool:
        return bool(self._m.accept_token(int(token_id)))

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self._m.fill_next_token_bitmask(bitmask, row)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens:
            self._m.rollback(num_tokens)

    def is_terminated(self) -> bool:
        return bool(self._m.is_terminated())


class XGrammarBackend(GrammarBackend):
    kinds = frozenset({"json_schema", "json_object", "regex", "ebnf"})

    def __init__(self, options: XGrammarOptions | None, build: BuildContext) -> None:
        import xgrammar as xgr

        if build.tokenizer is None or build.model_config is None:
            raise ValueError("the xgrammar backend needs the tokenizer and the model config "
                             "(BuildContext.tokenizer, BuildContext.model_config)")
        self.options = options or XGrammarOptions()
        self.vocab_size = int(build.model_config.vocab_size)
        info = tokenizer_info(build.tokenizer, self.vocab_size)
        self._xgr = xgr
        self.compiler = xgr.GrammarCompiler(info, max_threads=self.options.max_threads,
                                            cache_enabled=True)

    def compile(self, grammar: Grammar) -> Any:
        try:
            if grammar.kind in ("json_schema", "json_object"):
                # json_object: OpenAI's "a JSON object", with the same whitespace rule as schemas
                schema = grammar.source if grammar.kind == "json_schema" else '{"type": "object"}'
                if isinstance(schema, str):
                    json.loads(schema)  # a readable error before xgrammar's
                return self.compiler.compile_json_schema(  # strict: no unlisted properties
                    schema, any_whitespace=self.options.any_whitespace,
                    strict_mode=grammar.kind == "json_schema")
            if grammar.kind == "regex":
                return self.compiler.compile_regex(grammar.source)
            if grammar.kind == "ebnf":
                return self.compiler.compile_grammar(grammar.source)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"json_schema is not valid JSON: {exc}") from None
        except (RuntimeError, ValueError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise GrammarError(f"cannot compile the {grammar.kind} constraint: {first}") from None
        raise GrammarError(f"the xgrammar backend does not compile {grammar.kind!r}; it "
                           f"compiles {', '.join(sorted(self.kinds))}")

    def matcher(self, compiled: Any) -> GrammarMatcher:
        return XGrammarMatcher(self._xgr.GrammarMatcher(compiled))


def tokenizer_info(tokenizer: Any, vocab_size: int) -> Any:
    """xgrammar's ``TokenizerInfo`` from hinge's Tokenizer (a ``tokenizers`` backend), as
    ``TokenizerInfo.from_huggingface`` builds it for a fast tokenizer, without transformers."""
    import xgrammar as xgr

    backend = tokenizer.backend
    vocab = backend.get_vocab(with_added_tokens=True)
    encoded = [""] * vocab_size
    for token, idx in vocab.items():
        if idx < vocab_size:
            encoded[idx] = token
    meta = xgr.TokenizerInfo._detect_metadata_from_hf(backend.to_str())
    stop = [t for t in tokenizer.eos_token_ids if t < vocab_size] or None
    return xgr.TokenizerInfo(encoded, meta["vocab_type"], vocab_size=vocab_size,
                             stop_token_ids=stop, add_prefix_space=meta["add_prefix_space"])


def build_xgrammar_backend(options: XGrammarOptions | None, build: BuildContext) -> XGrammarBackend:
    """The factory of the ``xgrammar`` grammar backend spec."""
    return XGrammarBackend(options, build)
