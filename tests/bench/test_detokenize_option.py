"""``SamplingParams.detokenize=False`` (what every bench run uses): tokens only, no text, and no
stop strings, which need text."""

from __future__ import annotations

from pathlib import Path

import pytest

from hinge.engine.output import append_token
from hinge.engine.request import Request
from hinge.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hinge.builtin import random_model_path

    return random_model_path(tmp_path_factory.mktemp("detok-model"))


def test_stop_strings_without_detokenization_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"stop strings \['\\n'\] need detokenize=True.*"
                                         r"stop_token_ids"):
        SamplingParams(stop="\n", detokenize=False)
    with pytest.raises(ValueError, match="detokenize must be True or False"):
        SamplingParams(detokenize="no")  # type: ignore[arg-type]
    SamplingParams(stop_token_ids=[5], detokenize=False)  # token stops still work


class ExplodingTokenizer:
    """Fails the test if anything asks it to decode."""

    def decode_stream(self, prompt_ids: list[int]) -> object:
        raise AssertionError("detokenize=False must not start a decode stream")


def test_append_token_never_touches_the_tokenizer_and_still_stops_on_tokens_and_length() -> None:
    params = SamplingParams(max_new_tokens=3, stop_token_ids=[9], detokenize=False)
    req = Request("r", [1, 2], params, arrival=0)
    append_token(req, 4, ExplodingTokenizer(), frozenset({0}))  # type: ignore[arg-type]
    assert req.finish_reason is None and req.text == ""
    append_token(req, 9, ExplodingTokenizer(), frozenset({0}))  # type: ignore[arg-type]
    assert req.finish_reason == "stop" and req.matched_stop == 9
    req = Request("s", [1, 2], params, arrival=0)
    for token in (4, 5, 6):
        append_token(req, token, ExplodingTokenizer(), frozenset({0}))  # type: ignore[arg-type]
    assert req.finish_reason == "length" and req.output_ids == [4, 5, 6] and req.text == ""


def test_the_engine_gives_the_same_tokens_without_text(model_dir: Path) -> None:
    from hinge.config import load_config
    from hinge.engine.engine import Engine

    engine = Engine(load_config(env={}, overrides={"model": str(model_dir), "device": "cpu"}),
                    progress=False)
    try:
        prompt = engine.tokenizer.encode("def fibonacci(n):")
        outs = {}
        for detokenize in (True, False):
            params = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True,
                                    detokenize=detokenize)
            rid = engine.add_request(list(prompt), params)
            steps = []
            while engine.has_unfinished():
                steps += [o for o in engine.step() if o.rid == rid]
            outs[detokenize] = steps
    finally:
        engine.close()
    with_text, without = outs[True][-1], outs[False][-1]
    assert without.token_ids == with_text.token_ids and len(without.token_ids) == 8
    assert with_text.text == engine.tokenizer.decode(with_text.token_ids) != ""
    assert without.text == "" and all(o.new_text == "" for o in outs[False])
