"""Tool calls and reasoning through the real ``openai`` client against servers of tiny seeded
Qwen3 (Hermes ``<tool_call>`` JSON template, ``--reasoning-parser qwen3``) and Qwen3.5 (XML
``<function=...>`` template that opens ``<think>``) checkpoints. The models are random, so
``required`` and named tool choices (forced by the grammar) carry the end-to-end checks; the
parsers' handling of free text is in test_tool_parsers.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest
from constraints import matches
from server_helpers import ServerProcess

from hinge.builtin import default_model_path
from hinge.testing.checkpoints import make_tiny_checkpoint

TEMPLATES = Path(__file__).parent / "templates"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
MESSAGES = [{"role": "user", "content": "Weather in Paris for 3 days?"}]


def _checkpoint(arch: str, template: str, path: Path) -> Path:
    make_tiny_checkpoint(arch, path, vocab_size=8192, eos_token_id=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(default_model_path() / name, path / name)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["chat_template"] = (TEMPLATES / template).read_text()
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def _serve(tmp_path_factory, arch: str, template: str, *extra: str):
    path = _checkpoint(arch, template, tmp_path_factory.mktemp(f"{arch}-tools"))
    proc = ServerProcess(path, tmp_path_factory.mktemp(f"{arch}-logs"), "--max-model-len", "1024",
                         *extra)
    client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key=proc.api_key, max_retries=0)
    return proc, client


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    proc, client = _serve(tmp_path_factory, "qwen3", "qwen3_hermes.jinja",
                          "--reasoning-parser", "qwen3")
    yield client
    client.close()
    assert proc.stop() == 0, proc.log()[-3000:]


@pytest.fixture(scope="module")
def qwen3_5(tmp_path_factory):
    proc, client = _serve(tmp_path_factory, "qwen3_5", "qwen3_5_xml.jinja",
                          "--reasoning-parser", "qwen3")
    yield client
    client.close()
    assert proc.stop() == 0, proc.log()[-3000:]


def _check_calls(calls) -> None:
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    assert calls, "no tool call"
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert matches("json_schema", by_name[call.function.name], call.function.arguments)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_required_tool_choice_returns_valid_calls(family, request):
    client = request.getfixturevalue(family)
    resp = client.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS,
                                          tool_choice="required", max_tokens=100, temperature=0,
                                          parallel_tool_calls=False)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None and len(choice.message.tool_calls) == 1
    _check_calls(choice.message.tool_calls)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_named_tool_choice_streams_one_call_with_valid_arguments(family, request):
    client = request.getfixturevalue(family)
    choice = {"type": "function", "function": {"name": "get_weather"}}
    full = client.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS,
                                          tool_choice=choice, max_tokens=60, temperature=0)
    calls = full.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather"]
    _check_calls(calls)
    chunks = list(client.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS,
                                                 tool_choice=choice, max_tokens=60,
                                                 temperature=0, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas] == ["get_weather"]
    assert "".join(d.function.arguments for d in deltas) == calls[0].function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_auto_tool_choice_renders_the_tools_and_answers(qwen3):
    with_tools = qwen3.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS,
                                               max_tokens=8, temperature=0)
    without = qwen3.chat.completions.create(model="default", messages=MESSAGES, max_tokens=8,
                                            temperature=0)
    assert with_tools.usage.prompt_tokens > without.usage.prompt_tokens + 50  # the tools block
    assert with_tools.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_tool_choice_naming_an_unknown_function_is_400(qwen3):
    with pytest.raises(openai.BadRequestError, match="not among the tools"):
        qwen3.chat.completions.create(
            model="default", messages=MESSAGES, tools=TOOLS, max_tokens=4,
            tool_choice={"type": "function", "function": {"name": "nope"}})


def test_a_template_that_opens_think_returns_reasoning_content_streamed_too(qwen3_5):
    kw = dict(model="default", messages=MESSAGES, max_tokens=12, temperature=0)
    full = qwen3_5.chat.completions.create(**kw)
    message = full.choices[0].message
    reasoning = message.model_extra.get("reasoning_content")
    assert reasoning and message.content in ("", None)
    chunks = list(qwen3_5.chat.completions.create(**kw, stream=True))
    streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                       for c in chunks if c.choices)
    assert streamed == reasoning


def test_chat_template_kwargs_reach_the_template(qwen3):
    on = qwen3.chat.completions.create(model="default", messages=MESSAGES, max_tokens=4,
                                       temperature=0)
    off = qwen3.chat.completions.create(model="default", messages=MESSAGES, max_tokens=4,
                                        temperature=0,
                                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens > on.usage.prompt_tokens  # the closed <think></think> block
    assert off.choices[0].message.model_extra.get("reasoning_content") is None
