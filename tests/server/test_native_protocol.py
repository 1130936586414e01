"""sglang's request fields mapped onto SamplingParams (no server): defaults for nulls, the
logprob window, grammar kinds, cache salts."""

from __future__ import annotations

import pytest

from hinge.sampling_params import Grammar
from hinge.server.native_protocol import GenerateRequest, native_sampling_params
from hinge.server.protocol import CompletionRequest


def params(**body):
    req = GenerateRequest.model_validate({"text": "x", **body})
    return native_sampling_params(req.sampling_params, req, prompt_len=10)


def test_nulls_take_sglangs_defaults():
    p = params(sampling_params={"temperature": None, "max_new_tokens": None, "top_k": None})
    assert (p.temperature, p.max_new_tokens, p.top_k, p.skip_special_tokens) == (1.0, 128, -1, True)


@pytest.mark.parametrize("start, want", [(None, None), (-1, None), (0, 1), (4, 5), (8, 9)])
def test_prompt_logprobs_start_one_past_logprob_start_len(start, want):
    p = params(return_logprob=True, logprob_start_len=start, top_logprobs_num=2)
    assert p.prompt_logprobs_start == want
    assert p.prompt_top_logprobs == (2 if want is not None else 0)


def test_grammar_fields_and_any_json():
    assert params(sampling_params={"regex": "a+"}).grammar == Grammar("regex", "a+")
    assert params(sampling_params={"json_schema": {"type": "integer"}}).grammar == \
        Grammar("json_schema", '{"type": "integer"}')
    assert params(sampling_params={"json_schema": "$$ANY$$"}).grammar == Grammar("json_schema", "{}")


def test_cache_salts_reach_the_engine():
    assert params(cache_salt="tenant-a").cache_salt == "tenant-a"
    assert params(extra_key="k", cache_salt="s").cache_salt == "k\x00s"
    assert params().cache_salt is None
    body = CompletionRequest.model_validate({"prompt": "x", "cache_salt": "v"})
    assert body.sampling_params(4, False, 0).cache_salt == "v"
