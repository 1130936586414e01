"""The prefill-hit and decode-hit harnesses (sglang's kl_multiturn tests, made exact), over the
public API only: ``hinge.LLM`` with the radix cache.

- prefill hit: a prefill-only request fills the cache with a prefix of the prompt; the prompt is
  generated (it must hit); then the cache is flushed and prompt + output rescored cold;
- decode hit: turn 2 = turn-1 prompt + the output it returned + a new suffix; it must hit the
  decode region (``cached_tokens >= floor((prompt + returned - 1) / grid) * grid``, a ratio of
  1.00); then flush and rescore turn 2 + its output cold.

With ``deterministic = true`` the logprobs of the warm run and of the cold rescore must be the
same bits. (A module of its own, not conftest.py: the test files import it by name.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hinge import SamplingParams


@dataclass
class Sample:
    prompt: list[int]
    cached: int  #: cached_tokens of the warm run
    floor: int  #: the least it had to hit
    warm: list[float]  #: output logprobs of the warm run
    cold: list[float]  #: the same tokens' logprobs from a cold rescore

    @property
    def max_diff(self) -> float:
        return max((abs(a - b) for a, b in zip(self.warm, self.cold, strict=True)), default=0.0)


def prompts(n: int, lens: tuple[int, int], vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, vocab - 1, (int(torch.randint(*lens, (1,), generator=g)),),
                          generator=g).tolist() for _ in range(n)]


def greedy(max_new: int, **kw) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new, temperature=0, ignore_eos=True, logprobs=True, **kw)


def rescore(llm, tokens: list[int], output: list[int]) -> list[float]:
    """The logprobs of ``output`` after ``tokens``, from a cold prefill (the cache flushed)."""
    assert llm.engine.flush_cache(), "flush_cache refused: requests still running"
    cold = llm.generate([tokens + output[:-1]], SamplingParams(
        max_new_tokens=1, temperature=0, ignore_eos=True, logprobs=True,
        prompt_logprobs_start=len(tokens)))[0]
    assert cold.cached_tokens == 0, "the rescore must be cold"
    assert cold.token_ids == output[-1:], "greedy rescore drew another last token"
    return list(cold.prompt_logprobs) + list(cold.logprobs)


def prefill_hit(llm, prompt: list[int], grid: int, max_new: int = 12) -> Sample:
    """Fill with 3/4 of the prompt (prefill only), generate the prompt, rescore cold."""
    assert llm.engine.flush_cache()
    prefix = prompt[:len(prompt) * 3 // 4]
    llm.generate([prefix], SamplingParams(max_new_tokens=0))
    warm = llm.generate([prompt], greedy(max_new))[0]
    cold = rescore(llm, prompt, warm.token_ids)
    return Sample(prompt, warm.cached_tokens, len(prefix) // grid * grid, list(warm.logprobs), cold)


def decode_hit(llm, prompt: list[int], grid: int, max_new: int = 20, suffix: tuple[int, ...] = (7, 9),
               params: SamplingParams | None = None) -> Sample:
    """Turn 1 generates; turn 2 resends prompt + what turn 1 returned + a suffix; rescore cold."""
    assert llm.engine.flush_cache()
    first = llm.generate([prompt], params or greedy(max_new))[0]
    returned = len(prompt) + len(first.token_ids)
    turn2 = prompt + list(first.token_ids) + list(suffix)
    warm = llm.generate([turn2], greedy(8))[0]
    cold = rescore(llm, turn2, warm.token_ids)
    return Sample(turn2, warm.cached_tokens, (returned - 1) // grid * grid, list(warm.logprobs), cold)
