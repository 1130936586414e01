"""What lm-eval, LangChain and vLLM-style clients need of the OpenAI routes: echo with prompt
logprobs (lm-eval's loglikelihood body replayed), /tokenize, /detokenize, /tokenizer_info,
logit_bias, best_of, response_format, readable 400s; the real ``openai`` client and httpx
against the real server, checked against the offline ``LLM``."""

from __future__ import annotations

import json

import openai
import pytest
from fixtures import body

from hinge import SamplingParams
from hinge.builtin.models import IM_END_ID


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.api_key, max_retries=0) as c:
        yield c


def test_lm_eval_loglikelihood_body_gets_prompt_logprobs_as_lm_eval_reads_them(server, llm):
    payload = body("lm_eval_loglikelihood")
    with server.client() as c:
        resp = c.post("/v1/completions", json=payload)
    assert resp.status_code == 200, resp.text
    choices = sorted(resp.json()["choices"], key=lambda ch: ch["index"])
    for choice, ids in zip(choices, payload["prompt"], strict=True):
        lps = choice["logprobs"]
        want = llm.generate([ids], SamplingParams(max_new_tokens=1, temperature=0, logprobs=True,
                                                  prompt_logprobs_start=0,
                                                  prompt_top_logprobs=1))[0]
        assert len(lps["token_logprobs"]) == len(ids) + 1  # prompt + the one generated token
        assert lps["token_logprobs"][0] is None and lps["top_logprobs"][0] is None
        assert lps["token_logprobs"][1:-1] == pytest.approx(want.prompt_logprobs, abs=1e-6)
        assert lps["token_logprobs"][-1] == pytest.approx(want.logprobs[0], abs=1e-6)
        # lm-eval's is_greedy: the continuation's logprob == max of the top dict, exactly
        for i, (lp, top) in enumerate(zip(lps["token_logprobs"][1:-1], lps["top_logprobs"][1:-1],
                                          strict=True)):
            greedy = want.prompt_top_logprobs[i][0][0] == ids[i + 1]
            assert (lp == max(top.values())) == greedy
        assert lps["text_offset"][0] == 0 and len(lps["tokens"]) == len(ids) + 1
        assert choice["text"].startswith(llm.tokenizer.decode(ids, skip_special_tokens=False))


def test_lm_eval_generate_until_body_stops_at_its_stop_strings(server, llm):
    payload = body("lm_eval_generate_until")
    with server.client() as c:
        resp = c.post("/v1/completions", json=payload)
    assert resp.status_code == 200, resp.text
    want = llm.generate(payload["prompt"], SamplingParams(max_new_tokens=16, temperature=0,
                                                          stop=payload["stop"], seed=1234))[0]
    assert resp.json()["choices"][0]["text"] == want.text


def test_echo_with_zero_max_tokens_returns_only_the_prompt(client, llm):
    resp = client.completions.create(model="tiny", prompt="Echo this back", max_tokens=0,
                                     echo=True, logprobs=2, temperature=0)
    choice = resp.choices[0]
    assert choice.text == "Echo this back"
    ids = llm.tokenizer.encode("Echo this back")
    assert len(choice.logprobs.token_logprobs) == len(ids)
    assert all(len(row) >= 2 for row in choice.logprobs.top_logprobs[1:])


def test_echo_streams_the_prompt_first(client):
    chunks = list(client.completions.create(model="tiny", prompt="Stream echo", max_tokens=4,
                                            echo=True, temperature=0, stream=True))
    full = client.completions.create(model="tiny", prompt="Stream echo", max_tokens=4, echo=True,
                                     temperature=0)
    assert chunks[0].choices[0].text.startswith("Stream echo")
    assert "".join(c.choices[0].text for c in chunks) == full.choices[0].text


def test_tokenize_detokenize_and_tokenizer_info_answer_as_vllm(server, llm):
    with server.client() as c:
        tok = c.post("/tokenize", json={"prompt": "Hello world", "add_special_tokens": False}).json()
        text = c.post("/detokenize", json={"tokens": tok["tokens"]}).json()
        info = c.get("/tokenizer_info").json()
        chat = c.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert tok["tokens"] == llm.tokenizer.encode("Hello world", add_special_tokens=False)
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 128
    assert text == {"prompt": "Hello world"}
    assert info["eos_token"] == "<|endoftext|>"
    assert chat["tokens"] == llm.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True)


def test_special_tokens_show_their_text_in_logprobs(client):
    resp = client.completions.create(model="tiny", prompt="x", max_tokens=2, temperature=0,
                                     logprobs=1, logit_bias={str(IM_END_ID): 100})
    assert resp.choices[0].logprobs.tokens == ["<|im_end|>"]
    assert resp.choices[0].finish_reason == "stop"


def test_logit_bias_steers_chat_and_completions(client):
    kw = dict(model="tiny", max_tokens=3, temperature=0, logit_bias={"1": 100})
    chat = client.chat.completions.create(messages=[{"role": "user", "content": "hi"}], logprobs=True,
                                          **kw)
    assert [c.token for c in chat.choices[0].logprobs.content] == ["<|im_start|>"] * 3
    comp = client.completions.create(prompt="hi", logprobs=0, **kw)
    assert comp.choices[0].logprobs.tokens == ["<|im_start|>"] * 3


def test_best_of_returns_the_samples_with_the_highest_mean_logprob(client):
    kw = dict(model="tiny", prompt="Best of", max_tokens=6, temperature=1.0, seed=11, logprobs=0)
    pool = client.completions.create(n=4, **kw)
    best = client.completions.create(n=1, best_of=4, **kw)

    def mean(choice):
        return sum(choice.logprobs.token_logprobs) / len(choice.logprobs.token_logprobs)

    top = max(pool.choices, key=mean)
    assert best.choices[0].text == top.text and len(best.choices) == 1
    assert best.usage.completion_tokens == pool.usage.completion_tokens
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client.completions.create(n=3, best_of=2, **kw)


def test_response_format_json_schema_gives_parseable_json(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                               "rank": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["city", "rank"], "additionalProperties": False}
    resp = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "A city?"}], max_tokens=40,
        temperature=0, response_format={"type": "json_schema",
                                        "json_schema": {"name": "c", "schema": schema}})
    value = json.loads(resp.choices[0].message.content)
    assert set(value) == {"city", "rank"} and isinstance(value["rank"], int)


@pytest.mark.parametrize("messages, needle", [
    ([{"role": "user"}], "messages[0] (user) has no content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "content part 0 has type 'image_url'"),
])
def test_bad_messages_are_400_in_words(client, messages, needle):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
    assert needle in str(err.value)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(extra_body={"audio": {"voice": "x"}}), "audio"),
    (dict(reasoning_effort="high"), "`reasoning_effort` is not supported"),
    (dict(store=True), "`store` is not supported"),
    (dict(service_tier="flex"), "`service_tier` 'flex'"),
    (dict(extra_body={"max_token": 3, "temprature": 0.5}), "unknown field(s) `max_token`, `temprature`"),
    (dict(tools=[{"type": "function", "function": {"name": "f"}}]), "does not support tools"),
    (dict(response_format={"type": "json_object"}, extra_body={"regex": "a"}), "at most one"),
])
def test_unsupported_chat_parameters_are_refused_not_ignored(client, kwargs, needle):
    """Used, not neutral, or not known at all: a 400 that names the field (never ignored)."""
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=2, **kwargs)
    assert needle in str(err.value)


def test_neutral_values_of_parameters_hinge_does_not_do_are_accepted(client):
    resp = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2, store=False,
        service_tier="auto", extra_body={"metadata": None, "reasoning_effort": None})
    assert resp.choices[0].finish_reason in ("length", "stop")
