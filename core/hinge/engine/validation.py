"""Checks a request must pass before it is queued: each failure says what to change."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hinge.sampling_params import SamplingParams


def validate_request(prompt_ids: list[int], params: SamplingParams, *, vocab_size: int,
                     max_model_len: int, kv_tokens: int) -> None:
    """Raise ValueError for an empty prompt, ids outside the vocab, a prompt or prompt +
    ``max_new_tokens`` beyond ``max_model_len``, or a request larger than the whole KV pool."""
    n, limit = len(prompt_ids), max_model_len
    if n == 0:
        raise ValueError("the prompt is empty: send at least one token")
    bad = [t for t in prompt_ids
           if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt token ids must be integers in [0, {vocab_size}) (the model's "
                         f"vocab size); got {bad[:5]}")
    bias = [t for t in (params.logit_bias or {}) if t >= vocab_size]
    if bias:
        raise ValueError(f"logit_bias names token ids outside the vocabulary [0, {vocab_size}): "
                         f"{bias[:5]}")
    if params.prompt_logprobs_start is not None and params.prompt_logprobs_start >= n:
        raise ValueError(f"the prompt logprobs start at position {params.prompt_logprobs_start}, "
                         f"but the prompt has {n} tokens; start below {n}")
    if n > limit:
        raise ValueError(f"the prompt has {n} tokens, more than max_model_len={limit}; "
                         "shorten the prompt")
    if n + params.max_new_tokens > limit:
        raise ValueError(
            f"prompt ({n} tokens) + max_new_tokens ({params.max_new_tokens}) = "
            f"{n + params.max_new_tokens} exceeds max_model_len={limit}; set max_new_tokens "
            f"<= {limit - n}")
    if n + params.max_new_tokens > kv_tokens:
        raise ValueError(
            f"prompt ({n}) + max_new_tokens ({params.max_new_tokens}) needs more KV than the "
            f"whole pool holds ({kv_tokens} tokens); lower max_new_tokens or raise "
            "kv_cache_bytes (CPU) / mem_fraction_static (CUDA)")
