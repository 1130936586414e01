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
