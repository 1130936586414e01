"""Grammar masks (structured outputs) on a CUDA GPU: the bitmask unpacks to the same rows as on
the CPU, and the engine on CUDA (attention auto, decode graphs on, overlap scheduling between
constrained steps) keeps constrained outputs inside their grammar, greedy and sampled, next to
unconstrained requests; in deterministic mode a constrained request gives the same tokens alone
and in a crowd."""

from __future__ import annotations

import json
import re

import pytest
import torch

from hinge import LLM, SamplingParams
from hinge.engine.sampler import unpack_bitmask
from hinge.sampling_params import Grammar

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

PATTERN = r"[a-f]{3}-[0-9]{2}"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "n": {"type": "integer"}},
          "required": ["name", "n"], "additionalProperties": False}


def test_a_bitmask_unpacks_to_the_same_rows_on_cuda_as_on_the_cpu():
    g = torch.Generator().manual_seed(0)
    mask = torch.randint(-(1 << 31), (1 << 31) - 1, (5, 257), generator=g, dtype=torch.int64)
    mask = mask.to(torch.int32)
    for vocab in (8192, 8200, 257 * 32):
        cpu = unpack_bitmask(mask, vocab)
        assert torch.equal(unpack_bitmask(mask.cuda(), vocab).cpu(), cpu)


def test_constrained_outputs_on_cuda_match_their_grammar_beside_free_requests():
    with LLM(device="cuda", attention="auto", cache="none") as llm:
        params = [SamplingParams(max_new_tokens=24, temperature=t, seed=s,
                                 grammar=Grammar("regex", PATTERN)) for t in (0.0, 1.0) for s in (1, 2)]
        params += [SamplingParams(max_new_tokens=64, temperature=t, seed=3,
                                  grammar=Grammar("json_schema", json.dumps(SCHEMA))) for t in (0.0, 0.8)]
        params += [SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)] * 2
        outs = llm.generate(["def f(x):", "import os", "x = 1", "# a", '{"', "{", "hello", "a"],
                            params)
        replays = llm.engine.stats().graph_replays
    for out in outs[:4]:
        assert out.finish_reason == "stop" and re.fullmatch(PATTERN, out.text), out.text
    for out in outs[4:6]:
        assert out.finish_reason == "stop", out.text
        value = json.loads(out.text)
        assert set(value) == {"name", "n"} and isinstance(value["n"], int)
    assert [len(o.token_ids) for o in outs[6:]] == [16, 16]
    assert replays["decode"] > 0, "the decode steps must have replayed graphs (masks outside them)"


def test_in_deterministic_mode_on_cuda_a_constrained_request_gives_the_same_tokens_alone_and_in_a_crowd():
    grammar = Grammar("regex", r"[a-z ]{4,40}\.")
    alone_params = SamplingParams(max_new_tokens=48, temperature=0.0, grammar=grammar)
    with LLM(device="cuda", attention="auto", cache="none", deterministic=True) as llm:
        (alone,) = llm.generate(["The cat"], [alone_params])
        crowd = llm.generate(["The cat"] + [f"prompt {i}" for i in range(9)],
                             [alone_params] + [SamplingParams(max_new_tokens=30, temperature=0.0,
                                                              ignore_eos=True)] * 9)
    assert re.fullmatch(r"[a-z ]{4,40}\.", alone.text), alone.text
    assert crowd[0].token_ids == alone.token_ids
