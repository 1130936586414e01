"""Per-request sampling and stopping parameters (``from hinge import SamplingParams``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

GrammarKind = Literal["json_schema", "json_object", "regex", "ebnf"]
GRAMMAR_KINDS: tuple[str, ...] = ("json_schema", "json_object", "regex", "ebnf")

#: below this a temperature samples as greedy (as in sglang): dividing the logits by it would
#: overflow float32 and turn the sampling distribution into NaN.
GREEDY_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class Grammar:
    """A structured-output constraint: the grammar backend compiles ``source`` as ``kind``
    (a JSON schema as JSON text, a regex, an EBNF grammar; ``json_object``: any JSON object,
    ``source`` unused)."""

    kind: GrammarKind
    source: str = ""

    def __post_init__(self) -> None:
        _check(self.kind in GRAMMAR_KINDS,
               f"grammar kind must be one of {', '.join(GRAMMAR_KINDS)}, got {self.kind!r}")
        _check(isinstance(self.source, str), f"grammar source must be text, got {self.source!r}")


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0  #: 0 (or below ``GREEDY_TEMPERATURE``) means greedy
    top_p: float = 1.0
    top_k: int = -1  #: -1 or 0 means off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] | str | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: bool = False  #: return the logprob of every output token
    top_logprobs: int = 0  #: also return this many most likely tokens per output position
    prompt_logprobs_start: int | None = None  #: return prompt logprobs from this position on
    #: False: no text for this request (``text``/``new_text`` stay empty), tokens only; saves the
    #: host's detokenization (benchmarks; ids the tokenizer does not know). No stop strings then.
    detokenize: bool = True
    #: eos and stop tokens are masked (and stop strings not checked) before this many tokens
    min_new_tokens: int = 0
    #: False: special tokens keep their text in ``text`` (True: dropped, as transformers does)
    skip_special_tokens: bool = True
    #: accepted for sglang/vLLM; a fast tokenizer (all hinge has) decodes the same either way
    spaces_between_special_tokens: bool = True
    #: regular expressions that stop generation where they match (the text is cut there)
    stop_regex: list[str] | str | None = None
    #: True: a matched stop string stays in ``text`` (sglang's ``no_stop_trim``)
    no_stop_trim: bool = False
    #: token id -> bias added to its logit before sampling (OpenAI's ``logit_bias``)
    logit_bias: dict[int, float] | None = None
    #: with ``prompt_logprobs_start``: also this many most likely tokens per prompt position
    prompt_top_logprobs: int = 0
    #: structured output: generation follows this grammar (``hinge.sampling_params.Grammar``)
    grammar: Grammar | None = None
    #: prefix-cache namespace: requests with different salts never share cached tokens
    #: (vLLM's ``cache_salt``, sglang's ``extra_key`` / ``cache_salt``)
    cache_salt: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if isinstance(self.stop_regex, str):
            self.stop_regex = [self.stop_regex]
        self.stop_regex = list(self.stop_regex or [])
        self.logit_bias = {int(k): float(v) for k, v in (self.logit_bias or {}).items()} or None
        for name in ("temperature", "top_p", "min_p", "repetition_penalty",
                     "frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        _check(isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 0,
               f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        _check(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        _check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        _check(isinstance(self.top_k, int) and self.top_k >= -1,
               f"top_k must be -1 (off) or an integer >= 0, got {self.top_k!r}")
        _check(0 <= self.min_p <= 1, f"min_p must be in [0, 1], got {self.min_p}")
        _check(self.repetition_penalty > 0,
               f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        _check(-2 <= self.frequency_penalty <= 2,
               f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        _check(-2 <= self.presence_penalty <= 2,
               f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        _check(isinstance(self.top_logprobs, int) and 0 <= self.top_logprobs <= 20,
               f"top_logprobs must be an integer in [0, 20], got {self.top_logprobs!r}")
        _check(self.prompt_logprobs_start is None or
               (isinstance(self.prompt_logprobs_start, int) and self.prompt_logprobs_start >= 0),
               f"prompt_logprobs_start must be None or an integer >= 0, got {self.prompt_logprobs_start!r}")
        _check(all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids),
               f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}")
        _check(all(isinstance(s, str) and s for s in self.stop),
               f"stop must be non-empty strings, got {self.stop!r}")
        _check(isinstance(self.detokenize, bool),
               f"detokenize must be True or False, got {self.detokenize!r}")
        _check(self.detokenize or not self.stop,
               f"stop strings {self.stop!r} need detokenize=True (they match text); with "
               "detokenize=False stop on token ids instead (stop_token_ids)")
        _check(isinstance(self.min_new_tokens, int) and self.min_new_tokens >= 0,
               f"min_new_tokens must be an integer >= 0, got {self.min_new_tokens!r}")
        _check(isinstance(self.prompt_top_logprobs, int) and 0 <= self.prompt_top_logprobs <= 20,
               f"prompt_top_logprobs must be an integer in [0, 20], got {self.prompt_top_logprobs!r}")
        _check(all(math.isfinite(v) and -100 <= v <= 100 for v in (self.logit_bias or {}).values()),
               f"logit_bias values must be in [-100, 100], got {self.logit_bias!r}")
        _check(all(k >= 0 for k in (self.logit_bias or {})),
               f"logit_bias keys must be token ids >= 0, got {sorted(self.logit_bias or {})[:5]}")
        for pattern in self.stop_regex:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ValueError(f"stop_regex {pattern!r} is not a valid regular expression: "
                                 f"{exc}") from None
        _check(self.detokenize or not self.stop_regex,
               "stop_regex needs detokenize=True (it matches text)")
        _check(self.cache_salt is None or isinstance(self.cache_salt, str),
               f"cache_salt must be a string or None, got {self.cache_salt!r}")
        _check(self.grammar is None or isinstance(self.grammar, Grammar),
               f"grammar must be a hinge.sampling_params.Grammar, got {self.grammar!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return (self.repetition_penalty != 1 or self.frequency_penalty != 0
                or self.presence_penalty != 0)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)
