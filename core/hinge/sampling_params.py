"""Per-request sampling and stopping parameters (``from hinge import SamplingParams``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: below this a temperature samples as greedy (as in sglang): dividing the logits by it would
#: overflow float32 and turn the sampling distribution into NaN.
GREEDY_TEMPERATURE = 1e-5


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

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
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
