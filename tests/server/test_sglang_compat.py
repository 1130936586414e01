"""sglang's native API as its own clients use it: captured bodies of ``bench_serving`` and
``RuntimeEndpoint`` replayed over httpx against the real server, and every field the issue lists
(``n``, ``min_new_tokens``, ``stop_regex``, ``logit_bias``, ``skip_special_tokens``, input top
logprobs, refused fields), checked against the offline ``LLM`` oracle."""

from __future__ import annotations

import json
import re

import pytest
from fixtures import body
from test_native_api import sse_events

from hinge import SamplingParams
from hinge.builtin.models import IM_END_ID


def post(server, payload):
    with server.client() as c:
        return c.post("/generate", json=payload)


def test_bench_serving_body_streams_cumulative_text_to_max_new_tokens(server, llm):
    resp = post(server, body("sglang_bench_serving"))
    assert resp.status_code == 200, resp.text
    chunks = sse_events(resp.text)
    want = llm.generate([body("sglang_bench_serving")["text"]], SamplingParams(
        max_new_tokens=8, temperature=0, ignore_eos=True))[0]
    assert chunks[-1]["text"] == want.text and chunks[-1]["output_ids"] == want.token_ids
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 9))
    assert all(want.text.startswith(c["text"]) for c in chunks)


def test_runtime_endpoint_gen_body_with_regex_matches_the_regex(server):
    resp = post(server, body("sglang_runtime_endpoint_gen"))
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert re.fullmatch(r"[0-9]{1,3}", out["text"]), out["text"]
    assert out["meta_info"]["finish_reason"]["type"] == "stop"


def test_runtime_endpoint_select_body_gives_input_logprobs_with_entry_zero_null(server, llm):
    payload = body("sglang_runtime_endpoint_select")
    resp = post(server, payload)
    assert resp.status_code == 200, resp.text
    start = payload["logprob_start_len"]
    for item, text in zip(resp.json(), payload["text"], strict=True):
        ids = llm.tokenizer.encode(text)
        want = llm.generate([ids], SamplingParams(max_new_tokens=1, temperature=0,
                                                  prompt_logprobs_start=start + 1))[0]
        triples = item["meta_info"]["input_token_logprobs"]
        assert [t[1] for t in triples] == ids[start:]
        assert triples[0][0] is None
        assert [t[0] for t in triples[1:]] == pytest.approx(want.prompt_logprobs, abs=1e-6)
        assert [t[2] for t in triples] == [llm.tokenizer.decode([i], skip_special_tokens=False)
                                           for i in ids[start:]]
        assert item["output_ids"] == [] and item["meta_info"]["finish_reason"]["type"] == "length"


def test_get_model_info_and_get_server_info_answer_as_sglang(server, model_dir):
    with server.client() as c:
        info = c.get("/get_model_info").json()
        same = c.get("/model_info").json()
        server_info = c.get("/get_server_info").json()
    assert info == same and info["model_path"] == str(model_dir) and info["is_generation"]
    assert "internal_states" in server_info and "version" in server_info


def test_default_logprob_start_len_gives_one_null_input_entry_and_top_logprobs(server, llm):
    ids = llm.tokenizer.encode("Top logprobs of the prompt")
    resp = post(server, {"input_ids": ids, "return_logprob": True, "top_logprobs_num": 3,
                         "logprob_start_len": 0,
                         "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
    meta = resp.json()["meta_info"]
    want = llm.generate([ids], SamplingParams(max_new_tokens=3, temperature=0, logprobs=True,
                                              prompt_logprobs_start=1, prompt_top_logprobs=3))[0]
    tops = meta["input_top_logprobs"]
    assert tops[0] is None and len(tops) == len(ids)
    assert [[t[1] for t in row] for row in tops[1:]] == [[t for t, _ in row]
                                                          for row in want.prompt_top_logprobs]
    # the chosen token's logprob and the top row come from one tensor: equal when greedy-chosen
    for (lp, tid, _), row in zip(meta["input_token_logprobs"][1:], tops[1:], strict=True):
        if tid == row[0][1]:
            assert lp == row[0][0]
    plain = post(server, {"input_ids": ids, "return_logprob": True,
                          "sampling_params": {"max_new_tokens": 2, "temperature": 0}}).json()
    assert plain["meta_info"]["input_token_logprobs"] == [[None, ids[-1], None]]


def test_n_expands_a_prompt_into_a_list_of_distinct_seeded_samples(server):
    payload = {"text": ["Alpha", "Beta"], "sampling_params": {
        "n": 3, "max_new_tokens": 6, "temperature": 1.0, "seed": 5, "ignore_eos": True}}
    first = post(server, payload).json()
    again = post(server, payload).json()
    assert len(first) == 6 and [x["output_ids"] for x in first] == [x["output_ids"] for x in again]
    assert len({tuple(x["output_ids"]) for x in first[:3]}) > 1
    single = post(server, {"text": "Alpha", "sampling_params": {
        "n": 2, "max_new_tokens": 6, "temperature": 1.0, "seed": 5, "ignore_eos": True}}).json()
    assert isinstance(single, list) and [x["output_ids"] for x in single] == \
        [x["output_ids"] for x in first[:2]]


def test_min_new_tokens_masks_eos_until_reached(server, llm):
    """A logit bias makes eos the greedy token; min_new_tokens still forces 5 tokens first."""
    eos = IM_END_ID
    sp = {"max_new_tokens": 12, "temperature": 0, "logit_bias": {str(eos): 100.0}}
    early = post(server, {"text": "Stop now", "sampling_params": sp}).json()
    assert early["output_ids"] == [eos]
    held = post(server, {"text": "Stop now", "sampling_params": {**sp, "min_new_tokens": 5}}).json()
    assert len(held["output_ids"]) == 6 and held["output_ids"][-1] == eos
    assert eos not in held["output_ids"][:5]
    assert held["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}


def test_stop_regex_cuts_the_text_where_the_pattern_matches(server, llm):
    full = llm.generate(["Hello world"], SamplingParams(max_new_tokens=16, temperature=0))[0].text
    word = re.search(r"[A-Za-z]{2,}", full[2:])
    if word is None:
        pytest.skip(f"greedy text {full!r} has no word to stop on")
    pattern = re.escape(word.group(0)[:2]) + r"\w*"
    got = post(server, {"text": "Hello world", "sampling_params": {
        "max_new_tokens": 16, "temperature": 0, "stop_regex": pattern}}).json()
    assert got["text"] == full[:re.search(pattern, full).start()]
    assert got["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}


def test_skip_special_tokens_false_keeps_special_token_text(server):
    sp = {"max_new_tokens": 3, "temperature": 0, "logit_bias": {"1": 100.0}, "ignore_eos": True}
    skipped = post(server, {"text": "x", "sampling_params": sp}).json()
    kept = post(server, {"text": "x", "sampling_params": {**sp, "skip_special_tokens": False}}).json()
    assert skipped["output_ids"] == [1, 1, 1] and skipped["text"] == ""
    assert kept["text"] == "<|im_start|>" * 3


def test_json_schema_and_ebnf_constrain_the_output(server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    out = post(server, {"text": "JSON:", "sampling_params": {
        "max_new_tokens": 20, "temperature": 0, "json_schema": json.dumps(schema)}}).json()
    assert json.loads(out["text"]) in ({"ok": True}, {"ok": False})
    ebnf = 'root ::= "yes" | "no"'
    out = post(server, {"text": "Answer:", "sampling_params": {
        "max_new_tokens": 5, "temperature": 0, "ebnf": ebnf}}).json()
    assert out["text"] in ("yes", "no") and out["meta_info"]["finish_reason"]["type"] == "stop"


@pytest.mark.parametrize("payload, needle", [
    ({"text": "x", "lora_path": "adapter-1"}, "lora_path"),
    ({"text": "x", "image_data": ["http://example.invalid/a.png"]}, "image_data"),
    ({"text": "x", "return_hidden_states": True}, "return_hidden_states"),
    ({"text": "x", "sampling_params": {"structural_tag": "{}"}}, "structural_tag"),
    ({"text": "x", "sampling_params": {"regex": "a", "ebnf": "root ::= \"a\""}}, "at most one"),
    ({"text": "x", "sampling_params": {"regex": "(unclosed"}}, "regex"),
    ({"text": "x", "sampling_params": {"json_schema": "{not json"}}, "json_schema"),
    ({"text": "x", "sampling_params": {"logit_bias": {"abc": 1.0}}}, "logit_bias"),
    ({"text": "x", "sampling_params": {"logit_bias": {"99999999": 1.0}}}, "logit_bias"),
    ({"text": "x", "sampling_params": {"stop_regex": "(unclosed"}}, "stop_regex"),
    ({"text": "ab", "return_logprob": True, "logprob_start_len": 50}, "logprob_start_len"),
    ({"text": ["a", "b"], "sampling_params": [{"n": 1}, {"n": 2}]}, "n must be the same"),
])
def test_fields_hinge_does_not_do_or_bad_values_are_400_naming_them(server, payload, needle):
    if isinstance(payload.get("sampling_params"), dict):  # within the 128-token context
        payload = {**payload, "sampling_params": {"max_new_tokens": 4, **payload["sampling_params"]}}
    resp = post(server, payload)
    assert resp.status_code == 400, resp.text
    assert needle in resp.json()["error"]["message"]


def test_neutral_values_of_unsupported_fields_and_nulls_are_accepted(server):
    payload = {"text": "x", "lora_path": None, "image_data": None, "return_routed_experts": False,
               "return_hidden_states": False, "session_params": None, "custom_logit_processor": None,
               "return_logprob": None, "logprob_start_len": None, "top_logprobs_num": None,
               "stream": None, "sampling_params": {
                   "max_new_tokens": 2, "temperature": None, "top_k": None, "stop": None,
                   "json_schema": None, "regex": None, "ebnf": None, "n": None,
                   "structural_tag": None, "custom_params": None}}
    resp = post(server, payload)
    assert resp.status_code == 200, resp.text
    assert resp.json()["meta_info"]["completion_tokens"] == 2
