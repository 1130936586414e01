"""Validation loss and greedy completions of a checkpoint computed by hinge itself.

The transformers side lives in ``evaluate.py``; ``python tools/train/evaluate.py --model DIR
--engine both`` prints both. Here every packed row is one hinge request with
``max_new_tokens=0`` and ``prompt_logprobs_start=1``: hinge returns the log-probability of every
row position after the first, which are exactly the targets ``evaluate.mean_nll`` scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def open_llm(model_dir: Path, device: str = "cpu", dtype: str = "float32", **options):
    """A hinge ``LLM`` on ``model_dir`` (no prefix cache, so every row is computed afresh)."""
    from hinge import LLM

    return LLM(str(model_dir), device=device, dtype=dtype, cache="none", **options)


def row_nll_sums(llm, rows: np.ndarray, batch_size: int = 8) -> np.ndarray:
    """Per row, the summed negative log-likelihood (nats) of ``row[1:]`` given its prefix."""
    from hinge import SamplingParams

    if rows.ndim != 2 or rows.shape[1] < 2:
        raise ValueError(f"rows must be [num_rows, seq_len >= 2], got shape {rows.shape}")
    params = SamplingParams(max_new_tokens=0, temperature=0, prompt_logprobs_start=1)
    sums = np.empty(len(rows), dtype=np.float64)
    for start in range(0, len(rows), batch_size):
        batch = [row.astype(np.int64).tolist() for row in rows[start : start + batch_size]]
        for i, out in enumerate(llm.generate(batch, params)):
            logprobs = out.prompt_logprobs or []
            if len(logprobs) != rows.shape[1] - 1:
                raise RuntimeError(
                    f"hinge returned {len(logprobs)} prompt logprobs for row {start + i} of "
                    f"{rows.shape[1]} tokens, expected {rows.shape[1] - 1}"
                )
            sums[start + i] = -float(np.sum(np.asarray(logprobs, dtype=np.float64)))
    return sums


def mean_nll(llm, rows: np.ndarray, batch_size: int = 8) -> float:
    """Mean next-token negative log-likelihood (nats) over ``rows[:, 1:]``, as hinge sees it."""
    return float(row_nll_sums(llm, rows, batch_size).sum() / rows[:, 1:].size)


def greedy_completions(llm, prompts: Sequence[str], max_new_tokens: int) -> dict[str, str]:
    """Temperature-0 completion text of each prompt (stops at the model's eos tokens)."""
    from hinge import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    outputs = llm.generate(list(prompts), params)
    return {prompt: out.text for prompt, out in zip(prompts, outputs, strict=True)}


def greedy_token_ids(llm, prompts: Sequence[str], max_new_tokens: int) -> dict[str, list[int]]:
    from hinge import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    outputs = llm.generate(list(prompts), params)
    return {prompt: list(out.token_ids) for prompt, out in zip(prompts, outputs, strict=True)}
