"""The built-in xgrammar backend passes the plugin kit's GrammarBackendContract, and the
engine applies its masks: greedy output under a regex matches it (CPU, embedded model)."""

from __future__ import annotations

import re

import pytest

from hinge.builtin.plugin import XGRAMMAR
from hinge.testing import GrammarBackendContract


class TestXGrammarBackend(GrammarBackendContract):
    @pytest.fixture
    def spec(self):
        return XGRAMMAR


def test_json_schema_whitespace_is_off_by_default_and_an_option():
    assert XGRAMMAR.validate_options({}).any_whitespace is False
    assert XGRAMMAR.validate_options({"any_whitespace": True}).any_whitespace is True


def test_engine_output_under_a_regex_matches_it_greedy_and_sampled():
    from hinge import LLM, SamplingParams
    from hinge.sampling_params import Grammar

    pattern = r"[a-f]{3}-[0-9]{2}"
    with LLM(cache="none") as llm:
        outs = llm.generate(["def f(x):", "import os"], [
            SamplingParams(max_new_tokens=20, temperature=t, seed=1, grammar=Grammar("regex", pattern))
            for t in (0.0, 1.0)])
    for out in outs:
        assert re.fullmatch(pattern, out.text), out.text
        assert out.finish_reason == "stop"


def test_with_overlap_on_a_constrained_request_still_matches_and_equals_no_overlap():
    """Overlap collects step n after launching n + 1; a grammar mask needs step n's token, so
    the engine collects first for constrained requests: same output either way."""
    from hinge import LLM, SamplingParams
    from hinge.sampling_params import Grammar

    pattern = r"(red|green|blue)-[0-9]{2,4}"
    outs = {}
    with LLM(cache="none") as llm:
        for overlap in (False, True):
            llm._engine().overlap = overlap
            params = [SamplingParams(max_new_tokens=24, temperature=1.0, seed=s,
                                     grammar=Grammar("regex", pattern)) for s in range(3)]
            params.append(SamplingParams(max_new_tokens=8, temperature=0))  # unconstrained
            outs[overlap] = [(o.text, o.finish_reason)
                             for o in llm.generate(["a", "b", "c", "d"], params)]
    assert outs[True] == outs[False]
    assert all(re.fullmatch(pattern, text) for text, _ in outs[True][:3])
