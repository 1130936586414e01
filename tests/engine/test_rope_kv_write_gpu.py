"""The q/k norm + rope kernel writing the step's KV (``HINGE_ROPE_KV_WRITE=1``) through the
engine on CUDA: the same greedy tokens and logprobs as the separate KV write, with every
attention backend that claims ``kv_written_by_layer`` (``pytest -m gpu``)."""

from __future__ import annotations

import pytest
import torch

from hinge import LLM, SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROMPTS = ["def fibonacci(n):\n    return", "import os\nfor x in range(10):\n", "class Foo:\n    def"]


@pytest.mark.parametrize("attention", ["flashinfer", "triton", "fa4"])
def test_the_rope_kernel_writing_the_kv_decodes_the_bits_of_the_separate_kv_write(tmp_path, monkeypatch,
                                                                                   attention):
    if attention == "fa4":
        pytest.importorskip("flash_attn.cute", reason="fa4 needs flash-attn-4 (the gpu extra)")
    src = make_tiny_checkpoint("qwen3", tmp_path / "src", hidden_size=256, intermediate_size=512,
                               head_dim=64, num_attention_heads=4, num_key_value_heads=2)
    write_byte_tokenizer(src)
    from hinge.layers.fast_triton import kv_write as kernel

    writes = []
    separate = kernel.kv_write
    monkeypatch.setattr(kernel, "kv_write", lambda *a, **kw: writes.append(1) or separate(*a, **kw))
    params = SamplingParams(max_new_tokens=16, temperature=0.0, logprobs=True)
    runs, launches = {}, {}
    for fused in ("1", "0"):
        monkeypatch.setenv("HINGE_ROPE_KV_WRITE", fused)
        writes.clear()
        with LLM(str(src), device="cuda", dtype="bfloat16", attention=attention) as llm:
            runs[fused] = [(o.token_ids, o.logprobs) for o in llm.generate(PROMPTS, params)]
        launches[fused] = len(writes)  # eager steps and graph captures (a backend's warm-up may
    assert launches["1"] < launches["0"], launches  # write through write_kv itself)
    assert runs["1"] == runs["0"]


def test_a_hybrid_model_with_the_rope_kernel_writing_the_kv_decodes_the_same_bits(tmp_path, monkeypatch):
    # Qwen3.5's gated attention layers (q/k norms with (1 + w), a quarter rotated) over flashinfer
    src = make_tiny_checkpoint("qwen3_5", tmp_path / "src", head_dim=64)  # a head flashinfer takes
    write_byte_tokenizer(src)
    params = SamplingParams(max_new_tokens=12, temperature=0.0, logprobs=True)
    runs = {}
    for fused in ("1", "0"):
        monkeypatch.setenv("HINGE_ROPE_KV_WRITE", fused)
        with LLM(str(src), device="cuda", dtype="bfloat16", attention="flashinfer") as llm:
            runs[fused] = [(o.token_ids, o.logprobs) for o in llm.generate(PROMPTS, params)]
    assert runs["1"] == runs["0"]
