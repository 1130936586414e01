"""Run requests through an ``Engine`` to the end: what engine-level tests do again and again.

``run_requests(engine, prompts, params)`` adds one request per prompt (``params`` one
``SamplingParams`` for all, or one per prompt), steps the engine until nothing is unfinished and
returns each request's final ``RequestOutput`` in prompt order (token ids, logprobs, finish
reason, ``cached_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def run_requests(engine: Any, prompts: Sequence[list[int]], params: Any) -> list[Any]:
    """The final output of each of ``prompts``, in order (see the module docstring)."""
    per = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
    if len(per) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(per)} SamplingParams; pass one for all "
                         "or one per prompt")
    rids = [engine.add_request(list(p), sp) for p, sp in zip(prompts, per, strict=True)]
    done: dict[str, Any] = {}
    while engine.has_unfinished():
        done.update({out.rid: out for out in engine.step() if out.finished})
    return [done[r] for r in rids]
