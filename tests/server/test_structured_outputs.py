"""Structured outputs on the default (embedded) model: 20 seeded JSON schemas and regexes,
greedy through the ``openai`` client and sampled through ``/generate``; at least 19 of 20
finish with ``stop`` and every one that does parses and matches (a ``length`` finish counts as
a failure). The checks (``constraints.matches``) are independent of the grammar backend."""

from __future__ import annotations

import json

import openai
import pytest
from constraints import constraints, matches
from server_helpers import ServerProcess

from hinge.builtin import default_model_path

PROMPT = "Output:\n"


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    proc = ServerProcess(default_model_path(), tmp_path_factory.mktemp("structured-logs"))
    yield proc
    assert proc.stop() == 0, proc.log()[-3000:]


def _report(results: list[tuple[str, object, str, str]]) -> tuple[int, list[str]]:
    stopped = sum(reason == "stop" for _, _, _, reason in results)
    wrong = [f"{kind} {spec!r}: {text!r}" for kind, spec, text, reason in results
             if reason == "stop" and not matches(kind, spec, text)]
    return stopped, wrong


def test_greedy_constrained_completions_finish_and_match(default_server):
    results = []
    with openai.OpenAI(base_url=default_server.base_url + "/v1", api_key=default_server.api_key,
                       max_retries=0) as client:
        for kind, spec in constraints(seed=0):
            extra = ({"response_format": {"type": "json_schema",
                                          "json_schema": {"name": "s", "schema": spec}}}
                     if kind == "json_schema" else {"regex": spec})
            resp = client.completions.create(model="default", prompt=PROMPT, max_tokens=96,
                                             temperature=0, extra_body=extra)
            choice = resp.choices[0]
            results.append((kind, spec, choice.text, choice.finish_reason))
    stopped, wrong = _report(results)
    assert stopped >= 19, [r for r in results if r[3] != "stop"]
    assert not wrong, wrong


def test_sampled_constrained_generations_finish_and_match(default_server):
    results = []
    with default_server.client() as c:
        for i, (kind, spec) in enumerate(constraints(seed=0)):
            sp = {"max_new_tokens": 96, "temperature": 1.0, "seed": i}
            sp["json_schema" if kind == "json_schema" else "regex"] = \
                json.dumps(spec) if kind == "json_schema" else spec
            out = c.post("/generate", json={"text": PROMPT, "sampling_params": sp}).json()
            results.append((kind, spec, out["text"], out["meta_info"]["finish_reason"]["type"]))
    stopped, wrong = _report(results)
    assert stopped >= 19, [r for r in results if r[3] != "stop"]
    assert not wrong, wrong


def test_streamed_constrained_chat_joins_to_valid_json(default_server):
    kind, schema = constraints(seed=0)[0]
    with openai.OpenAI(base_url=default_server.base_url + "/v1", api_key=default_server.api_key,
                       max_retries=0) as client:
        chunks = list(client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "JSON please"}],
            max_tokens=96, temperature=0, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert matches(kind, schema, text), text
