"""The ``flashinfer`` backend on a GPU with the real kernels: the attention contract (graph
claims included), its JIT cache on disk, and the engine giving the torch backend's greedy tokens.

Run on the GPU machine: ``python -m pytest -q -m gpu tests/builtin/test_flashinfer_gpu.py``.
The first run compiles flashinfer's kernels (~20 s each) into its JIT cache.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from hinge.builtin.plugin import FLASHINFER_ATTENTION
from hinge.llm import LLM
from hinge.sampling_params import SamplingParams
from hinge.testing import AttentionBackendContract

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None,
                       reason="needs flashinfer-python (the gpu extra)"),
]

#: |logprob difference| allowed between the flashinfer and torch runs (bf16 activations)
LOGPROB_ATOL = 0.08
#: a greedy token may differ only where the two best tokens are this close (a bf16 near-tie)
NEAR_TIE = 0.1


class TestFlashInferAttentionBackend(AttentionBackendContract):
    """Prefill, cached prefix, decode, mixed, verify, GQA layouts, page sizes 1/16/64, bf16 and
    fp16, sliding window, and decode/prefill graph replay against the float64 oracle."""

    @pytest.fixture
    def spec(self):
        return FLASHINFER_ATTENTION

    @pytest.fixture
    def options(self):
        return {"workspace_mb": 128}


WARMUP = """
import json, torch
from hinge.builtin.flashinfer_attention import FlashInferAttentionBackend
from hinge.builtin.flashinfer_runtime import jit_cache_dir
from hinge.contracts import AttentionLayer, KVCache
from hinge.plugins.specs import BuildContext
layers = [AttentionLayer(0, 4, 2, 64, 0.125), AttentionLayer(1, 32, 8, 128, 128 ** -0.5)]
ks = [torch.zeros(64 * 16, lay.num_kv_heads, lay.head_dim, dtype=torch.bfloat16, device="cuda")
      for lay in layers]
kv = KVCache(ks, [torch.zeros_like(k) for k in ks], 16)
build = BuildContext(device="cuda", dtype=torch.bfloat16, deterministic=False, page_size=16)
FlashInferAttentionBackend(None, build).warmup(layers, kv)
print(json.dumps({str(p): p.stat().st_mtime_ns for p in jit_cache_dir().rglob("*.so")}))
"""


def test_a_second_process_loads_the_warmed_up_kernels_from_disk_without_compiling():
    """Warm-up fills flashinfer's JIT cache; a second start finds every kernel there (no .so is
    written again)."""
    if importlib.util.find_spec("flashinfer_jit_cache") is not None:
        pytest.skip("flashinfer-jit-cache ships precompiled kernels: nothing is compiled")
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", WARMUP], capture_output=True, text=True,
                             timeout=1200)
        assert run.returncode == 0, run.stderr[-3000:]
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first, "warm-up compiled nothing into the JIT cache directory"
    assert second == first, "the second start compiled kernels again"


class TestFlashInferWithoutDecodeSplit(TestFlashInferAttentionBackend):
    """The same kit with ``decode_split_kv = never`` (``auto`` takes it once a step's requests x
    KV heads fill the SMs): every decode plan passes ``disable_split_kv``, eager and captured."""

    @pytest.fixture
    def options(self):
        return {"workspace_mb": 128, "decode_split_kv": "never"}


def greedy(model: str, attention: str, prompts: list[list[int]], **kw):
    params = SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True, logprobs=True,
                            top_logprobs=2)
    with LLM(model, device="cuda", dtype="bfloat16", attention=attention, chunked_prefill_size=16,
             **kw) as llm:
        outs = llm.generate(prompts, params)
        return outs, llm.engine.plan, llm.engine.stats()


def assert_same_greedy_run(ours, ref) -> None:
    """Same tokens and close logprobs; a token may differ only at a near-tie of the reference."""
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        for pos, (ta, tb) in enumerate(zip(a.token_ids, b.token_ids, strict=True)):
            if ta != tb:
                top = dict(b.top_logprobs[pos])
                assert ta in top and abs(top[tb] - top[ta]) < NEAR_TIE, (
                    f"prompt {i}: token {pos} is {ta} with flashinfer, {tb} with torch, and "
                    f"torch's top-2 {b.top_logprobs[pos]} is no near-tie")
                break
            assert abs(a.logprobs[pos] - b.logprobs[pos]) <= LOGPROB_ATOL, (
                f"prompt {i}, token {pos}: logprob {a.logprobs[pos]:.4f} (flashinfer) vs "
                f"{b.logprobs[pos]:.4f} (torch)")


def _prompts(lens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in lens]


@pytest.mark.parametrize("model", ["embedded", "tiny-qwen3-hd64"])
def test_engine_with_flashinfer_gives_the_torch_backends_greedy_tokens(model, tmp_path):
    """Prefill, chunked prefill over a cached prefix, mixed and decode steps (and decode graph
    replays when the plan captures them) through flashinfer match the torch reference."""
    if model == "embedded":
        from hinge.builtin import default_model_path

        path, vocab = str(default_model_path()), 8192
    else:
        from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

        path, vocab = str(make_tiny_checkpoint("qwen3", tmp_path / "m", seed=3, head_dim=64)), 256
        write_byte_tokenizer(path)
    prompts = _prompts([5, 40, 1, 23, 70, 9], vocab)
    ours, plan, stats = greedy(path, "auto", prompts)
    assert plan.attention.name == "flashinfer", plan.notes
    ref, ref_plan, _ = greedy(path, "torch", prompts)
    assert ref_plan.attention.name == "torch"
    assert_same_greedy_run(ours, ref)
    if plan.graphs["decode"].enabled:
        assert stats.graph_replays.get("decode", 0) > 0, "decode graphs were planned but never replayed"
