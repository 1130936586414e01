"""Deterministic mode on a hybrid model: the logprobs of a request's own output, rescored as a
prompt (prefill rows), are the bits its decode steps produced (decode rows)."""

from __future__ import annotations

import torch
from hybrid_harness import VOCAB

from hinge import LLM, SamplingParams
from hinge.testing.checkpoints import write_byte_tokenizer


def test_hybrid_rescore_prompt_logprobs_equal_the_decode_logprobs_bit_for_bit(hybrid_checkpoints):
    path = hybrid_checkpoints("Qwen3_5ForCausalLM")
    if not (path / "tokenizer.json").exists():
        write_byte_tokenizer(path, VOCAB)
    prompt = torch.randint(2, VOCAB - 1, (19,), generator=torch.Generator().manual_seed(3)).tolist()
    with LLM(str(path), deterministic=True, page_size=4) as llm:
        out = llm.generate([prompt], SamplingParams(max_new_tokens=8, temperature=0,
                                                    ignore_eos=True, logprobs=True))[0]
        rescore = llm.generate([prompt + out.token_ids[:-1]], SamplingParams(
            max_new_tokens=1, temperature=0, ignore_eos=True, logprobs=True,
            prompt_logprobs_start=len(prompt)))[0]
    assert rescore.prompt_logprobs + rescore.logprobs == out.logprobs
