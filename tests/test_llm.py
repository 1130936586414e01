"""``LLM.generate`` against transformers: greedy tokens, logprobs, prompt logprobs, batching."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hinge import LLM, SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

ARCHS = ("qwen3", "llama", "qwen3_moe")
PROMPT_LENS = (5, 23, 1, 40, 12, 17)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for arch in ARCHS:
        path = make_tiny_checkpoint(arch, tmp_path_factory.mktemp(arch), seed=3)
        write_byte_tokenizer(path)
        out[arch] = path
    return out


@pytest.fixture(scope="module")
def hf_models(checkpoints):
    from transformers import AutoModelForCausalLM

    return {arch: AutoModelForCausalLM.from_pretrained(str(p), dtype=torch.float32).eval()
            for arch, p in checkpoints.items()}


def _prompts(n_list=PROMPT_LENS, seed=0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in n_list]


_HF_GREEDY: dict[tuple, list[int]] = {}


def _hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    key = (id(model), tuple(prompt), n)
    if key not in _HF_GREEDY:
        _HF_GREEDY[key] = _hf_generate(model, prompt, n)
    return _HF_GREEDY[key]


def _hf_generate(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                             dtype=torch.long), do_sample=False, max_new_tokens=n,
                             min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def _hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, dim=-1)


GREEDY = SamplingParams(max_new_tokens=32, temperature=0, ignore_eos=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_32_tokens_match_transformers_single_prompts(arch, checkpoints, hf_models):
    with LLM(str(checkpoints[arch])) as llm:
        for prompt in _prompts((5, 23)):
            out = llm.generate([prompt], GREEDY)[0]
            assert out.token_ids == _hf_greedy(hf_models[arch], prompt, 32)
            assert out.finish_reason == "length"


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_batch_of_mixed_lengths_with_chunked_prefill_matches_transformers(
        arch, checkpoints, hf_models):
    prompts = _prompts()
    with LLM(str(checkpoints[arch]), chunked_prefill_size=16, page_size=4) as llm:
        outs = llm.generate(prompts, GREEDY)
        steps = llm.engine.stats().forward_steps
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == _hf_greedy(hf_models[arch], prompt, 32), len(prompt)
    assert steps > 32, "a 98-token prompt load at 16 tokens per step needs extra prefill steps"


def test_logprobs_top_logprobs_and_prompt_logprobs_equal_transformers(checkpoints, hf_models):
    prompts = _prompts((9, 30, 4))
    params = SamplingParams(max_new_tokens=12, temperature=0.9, seed=5, ignore_eos=True,
                            logprobs=True, top_logprobs=4, prompt_logprobs_start=2)
    with LLM(str(checkpoints["qwen3"]), chunked_prefill_size=8) as llm:
        outs = llm.generate(prompts, params)
    for prompt, out in zip(prompts, outs, strict=True):
        ref = _hf_logprobs(hf_models["qwen3"], prompt + out.token_ids)
        n = len(prompt)
        want = [ref[n - 1 + i, t].item() for i, t in enumerate(out.token_ids)]
        assert out.logprobs == pytest.approx(want, abs=1e-4)
        for i, top in enumerate(out.top_logprobs):
            assert [t for t, _ in top] == ref[n - 1 + i].topk(4).indices.tolist()
            assert [lp for _, lp in top] == pytest.approx(ref[n - 1 + i].topk(4).values.tolist(),
                                                          abs=1e-4)
        want_prompt = [ref[p - 1, prompt[p]].item() for p in range(2, n)]
        assert out.prompt_logprobs == pytest.approx(want_prompt, abs=1e-4)


def test_prompt_logprobs_from_zero_skip_the_first_position_and_need_no_output(checkpoints,
                                                                              hf_models):
    prompt = _prompts((20,))[0]
    with LLM(str(checkpoints["llama"]), chunked_prefill_size=6) as llm:
        out = llm.generate([prompt], SamplingParams(max_new_tokens=0, prompt_logprobs_start=0))[0]
    ref = _hf_logprobs(hf_models["llama"], prompt)
    assert out.token_ids == [] and out.finish_reason == "length"
    assert out.prompt_logprobs == pytest.approx(
        [ref[p - 1, prompt[p]].item() for p in range(1, 20)], abs=1e-4)


def test_generate_accepts_strings_and_one_params_per_prompt(checkpoints):
    with LLM(str(checkpoints["qwen3"])) as llm:
        a, b = llm.generate(["hello", [104, 105]], [SamplingParams(max_new_tokens=3, temperature=0),
                                                    SamplingParams(max_new_tokens=5, temperature=0)])
        assert a.prompt_token_ids == list(b"hello") and len(a.token_ids) == 3
        assert b.prompt_token_ids == [104, 105] and len(b.token_ids) == 5
        assert a.text == llm.tokenizer.decode(a.token_ids)
        assert (a.cached_tokens, a.spec_verify_ct, a.spec_accepted_tokens) == (0, 0, 0)
        single = llm.generate("hello", SamplingParams(max_new_tokens=3, temperature=0))
        assert single[0].token_ids == a.token_ids
        with pytest.raises(ValueError, match="2 prompts"):
            llm.generate(["a", "b"], [SamplingParams()])
        assert llm.flush_cache() is True
    with pytest.raises(RuntimeError, match="closed"):
        llm.generate("x")


def test_chat_applies_the_chat_template(checkpoints, tmp_path):
    import shutil

    path = tmp_path / "chat"
    shutil.copytree(checkpoints["qwen3"], path)
    (path / "tokenizer_config.json").write_text(
        '{"chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}\\n'
        '{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"}')
    with LLM(str(path)) as llm:
        out = llm.chat([{"role": "user", "content": "hi"}],
                       SamplingParams(max_new_tokens=2, temperature=0))[0]
    assert out.prompt_token_ids == list(b"<user>hi\n<assistant>")


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_on_cuda_matches_transformers_on_cuda(arch, checkpoints):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(checkpoints[arch]), dtype=torch.float32)
    hf = hf.to("cuda").eval()
    prompts = _prompts()
    with LLM(str(checkpoints[arch]), device="cuda", dtype="float32", chunked_prefill_size=16,
             page_size=4) as llm:
        outs = llm.generate(prompts, GREEDY)
        kv_tokens = llm.engine.server_info()["kv_cache"]["tokens"]
    assert kv_tokens > 100_000, "on cuda the pool is sized from mem_fraction_static"
    for prompt, out in zip(prompts, outs, strict=True):
        with torch.no_grad():
            ids = torch.tensor([prompt], device="cuda")
            ref = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=32, min_new_tokens=32, eos_token_id=None,
                              pad_token_id=0)[0, len(prompt):].tolist()
        assert out.token_ids == ref, len(prompt)


@pytest.mark.gpu
@needs_cuda
def test_deterministic_logprobs_on_cuda_are_independent_of_batch_and_chunking(checkpoints):
    prompts = _prompts((5, 23, 1, 40, 12, 17, 33, 8), seed=4)
    params = SamplingParams(max_new_tokens=24, temperature=0.7, seed=9, ignore_eos=True,
                            logprobs=True)
    path = str(checkpoints["qwen3"])
    kw = dict(device="cuda", dtype="bfloat16", deterministic=True, kv_cache_bytes=1 << 30)
    with LLM(path, **kw) as llm:
        alone = llm.generate([prompts[3]], params)[0]
    with LLM(path, chunked_prefill_size=16, **kw) as llm:
        batch = llm.generate(prompts, params)[3]
    with LLM(path, chunked_prefill_size=7, **kw) as llm:
        rechunked = llm.generate(prompts[::-1], params)[4]
    assert alone.token_ids == batch.token_ids == rechunked.token_ids
    assert alone.logprobs == batch.logprobs == rechunked.logprobs


def test_llm_without_a_model_runs_the_embedded_default():
    from hinge.builtin import default_model_path

    with LLM() as llm:
        out = llm.generate("def fibonacci(n):", SamplingParams(max_new_tokens=4, temperature=0,
                                                               ignore_eos=True))[0]
        assert llm.engine.config.model == str(default_model_path())
    assert len(out.token_ids) == 4 and out.finish_reason == "length"


def test_seeded_requests_reproduce_and_unseeded_follow_the_engine_seed(checkpoints):
    prompts = _prompts((6, 11))
    seeded = SamplingParams(max_new_tokens=16, temperature=1.0, seed=77, ignore_eos=True)
    free = SamplingParams(max_new_tokens=16, temperature=1.0, ignore_eos=True)
    with LLM(str(checkpoints["qwen3"]), seed=1) as llm:
        a = llm.generate(prompts, seeded)
        b = llm.generate(prompts[:1], seeded)
        c = llm.generate(prompts, free)
    with LLM(str(checkpoints["qwen3"]), seed=1) as llm:
        d = llm.generate(prompts, free)
    assert a[0].token_ids == b[0].token_ids
    assert [o.token_ids for o in c] == [o.token_ids for o in d]
    assert c[0].token_ids != a[0].token_ids, "a different seed should draw differently"


def test_tight_pool_retracts_and_greedy_still_matches_transformers(checkpoints, hf_models):
    prompts = _prompts()
    # 20 usable pages of 4 tokens (512 bytes per token) = 80 tokens for 290 tokens of requests
    with LLM(str(checkpoints["qwen3"]), page_size=4, kv_cache_bytes=21 * 4 * 512,
             chunked_prefill_size=16) as llm:
        outs = llm.generate(prompts, GREEDY)
        stats = llm.engine.stats()
    assert stats.num_retractions > 0 and stats.kv_pages_used == 0
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == _hf_greedy(hf_models["qwen3"], prompt, 32), len(prompt)


def test_overflowing_penalty_or_temperature_samples_instead_of_crashing(tiny_qwen3_llm):
    """A tiny repetition penalty or temperature overflows the logits; sampling stays defined."""
    greedy = tiny_qwen3_llm.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, temperature=0))
    tiny = tiny_qwen3_llm.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, temperature=1e-30))
    assert tiny[0].token_ids == greedy[0].token_ids
    out = tiny_qwen3_llm.generate([[5, 6, 7]], SamplingParams(
        max_new_tokens=4, temperature=1.0, repetition_penalty=6e-192, seed=3, ignore_eos=True))
    assert len(out[0].token_ids) == 4


def test_a_failed_generate_leaves_the_llm_usable(tiny_qwen3_llm, monkeypatch):
    engine = tiny_qwen3_llm.engine
    real_step = engine.step

    def failing_step():
        monkeypatch.setattr(engine, "step", real_step)
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "step", failing_step)
    with pytest.raises(RuntimeError, match="boom"):
        tiny_qwen3_llm.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4))
    expected = [5, 6, 7]
    out = tiny_qwen3_llm.generate([expected], SamplingParams(max_new_tokens=4, temperature=0))
    assert out[0].finish_reason in ("length", "stop") and out[0].prompt_token_ids == expected


@pytest.fixture
def tiny_qwen3_llm(checkpoints):
    with LLM(str(checkpoints["qwen3"])) as llm:
        yield llm
