"""Tool-call and reasoning parsers on text (no server): whole replies, and the same replies fed
one character at a time as a stream, which must add up to the whole-reply result."""

from __future__ import annotations

import json

import pytest

from hinge.server.reasoning import StreamingReasoning, split_reasoning, starts_in_reasoning
from hinge.server.tool_parsers import (
    StreamingToolCalls,
    parse_tool_calls,
    parser_for_template,
    parser_name,
)

HERMES = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
          '"days": 3}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": '
          '"UTC"}}\n</tool_call>')
XML = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
       "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")


def test_hermes_calls_are_parsed_with_the_content_before_them():
    content, calls = parse_tool_calls(HERMES, "hermes")
    assert content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "UTC"})]


def test_xml_parameters_are_typed_when_they_parse_as_json():
    content, calls = parse_tool_calls(XML, "qwen3_xml")
    assert content == "" and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris", "days": 3}


@pytest.mark.parametrize("text", ["<tool_call>\n{not json}\n</tool_call>", "no calls here",
                                  "<tool_call>\n[1, 2]\n</tool_call>"])
def test_text_that_does_not_parse_stays_content(text):
    assert parse_tool_calls(text, "hermes") == (text, [])


@pytest.mark.parametrize("text, parser", [(HERMES, "hermes"), (XML, "qwen3_xml"),
                                          ("Just an answer with < and <tool", "hermes")])
def test_streaming_one_character_at_a_time_adds_up_to_the_whole_parse(text, parser):
    stream = StreamingToolCalls(parser)
    content, calls = "", []
    for i in range(1, len(text) + 1):
        delta, new = stream.feed(text[:i], finished=i == len(text))
        content += delta
        calls += new
    want_content, want_calls = parse_tool_calls(text, parser)
    assert content == want_content
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in want_calls]


def test_parser_names_and_template_detection():
    assert parser_name("qwen3") == "hermes" and parser_name("qwen3_coder") == "qwen3_xml"
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        parser_name("nope")
    assert parser_for_template("{% if tools %}<tool_call>{% endif %}") == "hermes"
    assert parser_for_template("{% if tools %}<function=x>{% endif %}") == "qwen3_xml"
    assert parser_for_template("{{ messages }}") is None


@pytest.mark.parametrize("text, in_reasoning, want", [
    ("plan it</think>\n\nThe answer", True, ("plan it", "The answer")),
    ("<think>plan</think>answer", False, ("plan", "answer")),
    ("just content", False, (None, "just content")),
    ("still thinking", True, ("still thinking", "")),
])
def test_reasoning_split(text, in_reasoning, want):
    assert split_reasoning(text, in_reasoning) == want


@pytest.mark.parametrize("text, in_reasoning", [
    ("plan it</think>\n\nThe answer", True), ("<think>plan</think>answer", False),
    ("just content", False), ("a < b </thin", True)])
def test_streamed_reasoning_adds_up_to_the_whole_split(text, in_reasoning):
    stream = StreamingReasoning(in_reasoning)
    reasoning = content = ""
    for i in range(1, len(text) + 1):
        r, c = stream.feed(text[:i], finished=i == len(text))
        reasoning, content = reasoning + r, content + c
    want_r, want_c = split_reasoning(text, in_reasoning)
    assert (reasoning, content) == (want_r or "", want_c)


def test_a_generation_prompt_that_opens_think_starts_in_reasoning():
    assert starts_in_reasoning("<|im_start|>assistant\n<think>\n")
    assert not starts_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not starts_in_reasoning("<|im_start|>assistant\n")


@pytest.mark.parametrize("flag", ["--tool-call-parser", "--reasoning-parser"])
def test_an_unknown_parser_is_one_error_line_and_exit_2_before_loading(flag):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "hinge.cli", "serve", "--port", "0", flag, "nope"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hinge: error: unknown") and "'nope'" in lines[0]
