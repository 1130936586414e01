"""The OpenAI-compatible routes through the real ``openai`` client against the real server."""

from __future__ import annotations

import openai
import pytest

from hinge import SamplingParams

SERVED_MODEL_NAMES = ("tiny-qwen3", "tiny")  #: the `server` fixture's --served-model-name

MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.api_key, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def model_name(client):
    return client.models.list().data[0].id


def test_models_lists_every_served_name_with_the_checkpoint_as_root(client, model_dir):
    models = client.models.list().data
    assert [m.id for m in models] == list(SERVED_MODEL_NAMES)
    assert {m.root for m in models} == {str(model_dir)}


@pytest.mark.parametrize("name", [*SERVED_MODEL_NAMES, "default"])
def test_a_request_may_name_any_served_name_or_default_and_is_answered_with_it(client, name):
    resp = client.completions.create(model=name, prompt="Hi", max_tokens=2, temperature=0)
    assert resp.model == name
    assert client.models.retrieve(name).id == name


def test_the_checkpoint_path_is_not_a_name_once_served_names_are_given(client, model_dir):
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model=str(model_dir), prompt="Hi", max_tokens=2)
    assert "unknown model" in str(err.value) and SERVED_MODEL_NAMES[0] in str(err.value)
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(str(model_dir))


def test_chat_greedy_equals_llm_chat_with_logprobs_and_usage(client, model_name, llm):
    resp = client.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=12,
                                          temperature=0, logprobs=True, top_logprobs=3)
    want = llm.chat(MESSAGES, SamplingParams(max_new_tokens=12, temperature=0, logprobs=True,
                                             top_logprobs=3))[0]
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == want.text
    assert choice.finish_reason == want.finish_reason
    got_lps = [c.logprob for c in choice.logprobs.content]
    assert got_lps == pytest.approx(want.logprobs, abs=1e-6)
    assert all(len(c.top_logprobs) == 3 for c in choice.logprobs.content)
    prompt_ids = llm.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    assert resp.usage.prompt_tokens == len(prompt_ids)
    assert resp.usage.completion_tokens == len(want.token_ids)
    assert resp.usage.total_tokens == len(prompt_ids) + len(want.token_ids)
    assert resp.usage.prompt_tokens_details.cached_tokens == want.cached_tokens


def test_chat_stream_deltas_join_to_the_full_answer_and_end_with_usage(client, model_name):
    full = client.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=10,
                                          temperature=0)
    chunks = list(client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0


def test_completions_batch_greedy_equals_llm_generate_with_logprobs(client, model_name, llm):
    prompts = ["The quick brown fox", "Once upon a time"]
    resp = client.completions.create(model=model_name, prompt=prompts, max_tokens=10,
                                     temperature=0, logprobs=2)
    want = llm.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0, logprobs=True,
                                                top_logprobs=2))
    assert [c.index for c in resp.choices] == [0, 1]
    for choice, w in zip(resp.choices, want, strict=True):
        assert choice.text == w.text
        assert choice.logprobs.token_logprobs == pytest.approx(w.logprobs, abs=1e-6)
        assert all(len(row) <= 2 for row in choice.logprobs.top_logprobs)
    assert resp.usage.prompt_tokens == sum(len(llm.tokenizer.encode(p)) for p in prompts)


def test_completions_stream_with_token_id_prompt(client, model_name, llm):
    ids = llm.tokenizer.encode("Hello there")
    chunks = list(client.completions.create(model=model_name, prompt=ids, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    want = llm.generate([ids], SamplingParams(max_new_tokens=8, temperature=0))[0]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want.text
    assert chunks[-1].usage.prompt_tokens == len(ids)


def test_seeded_sampling_repeats_and_n_gives_distinct_choices(client, model_name):
    kw = dict(model=model_name, prompt="Seeds:", max_tokens=8, temperature=1.0, seed=7)
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text
    many = client.completions.create(**kw, n=3)
    assert len(many.choices) == 3 and many.choices[0].text == a.choices[0].text


def test_an_unknown_model_is_404_naming_the_served_ones(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=4)
    assert "unknown model 'no-such-model'" in str(err.value)
    assert err.value.body["code"] == 404 and err.value.body["type"] == "model_not_found"


@pytest.mark.parametrize("kwargs, needle", [
    (dict(temperature=-1), "temperature"),
    (dict(top_p=0), "top_p"),
    (dict(max_tokens=10_000), "max_new_tokens"),
])
def test_bad_chat_requests_are_400_with_a_message(client, model_name, kwargs, needle):
    args = dict(model=model_name, messages=MESSAGES, max_tokens=4) | kwargs
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**args)
    assert needle in str(err.value)
