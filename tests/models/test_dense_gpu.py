"""The dense families on CUDA (run on the GPU machine: ``pytest -m gpu tests/models``)."""

from __future__ import annotations

import pytest
import torch
from model_oracle import ARCHS, assert_logits_close, build_context

from hinge.builtin.no_quant import NoQuantizer
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.models.loader import load_model
from hinge.testing.paged_steps import PagedSteps

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def load_cuda(path, dtype, deterministic=False):
    build = build_context(deterministic)
    build.device, build.dtype = "cuda", dtype
    model = load_model(path, device="cuda", dtype=dtype, quantizer=NoQuantizer(None, build),
                       deterministic=deterministic, progress=False)
    return model, PagedSteps(model, TorchAttentionBackend(None, build), device="cuda")


def hf_cuda_logits(path, ids, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager").cuda()
    with torch.no_grad():
        return hf(torch.tensor([ids], device="cuda")).logits[0].float().cpu()


@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_float32_chunked_and_batched_logits_match_transformers(arch, tiny_checkpoint):
    path = tiny_checkpoint(arch)
    ids = torch.randint(0, 256, (45,), generator=torch.Generator().manual_seed(0)).tolist()
    ref = hf_cuda_logits(path, ids)
    _, runner = load_cuda(path, torch.float32)
    got = [runner.step([("a", ids[:20]), ("b", ids[:7])]).logits[:20]]
    got.append(runner.step([("a", ids[20:44]), ("b", ids[7:8])]).logits[:24])
    got.append(runner.step([("a", ids[44:45]), ("b", ids[8:9])]).logits[:1])
    assert_logits_close(torch.cat(got).cpu(), ref)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_cuda_bfloat16_error_is_no_worse_than_transformers_own_bfloat16(arch, tiny_checkpoint):
    path = tiny_checkpoint(arch)
    ids = torch.randint(0, 256, (45,), generator=torch.Generator().manual_seed(1)).tolist()
    ref = hf_cuda_logits(path, ids)
    hf_err = (hf_cuda_logits(path, ids, torch.bfloat16) - ref).abs().max() / ref.abs().max()
    _, runner = load_cuda(path, torch.bfloat16)
    ours = runner.step([("a", ids)]).logits.cpu()
    ours_err = (ours - ref).abs().max() / ref.abs().max()
    assert ours_err <= 2 * hf_err, f"hinge bf16 error {ours_err:.3g} vs transformers bf16 {hf_err:.3g}"


def test_cuda_deterministic_logits_bit_identical_alone_batched_and_chunked(tiny_checkpoint):
    path = tiny_checkpoint("qwen3_moe")
    ids = torch.randint(0, 256, (90,), generator=torch.Generator().manual_seed(2)).tolist()
    _, runner = load_cuda(path, torch.bfloat16, deterministic=True)
    alone = runner.step([("a", ids)]).logits
    _, runner = load_cuda(path, torch.bfloat16, deterministic=True)
    batched = runner.step([("x", ids[:33]), ("b", ids), ("y", ids[5:9])]).logits[33:123]
    _, runner = load_cuda(path, torch.bfloat16, deterministic=True)
    chunked = torch.cat([runner.step([("c", ids[lo:hi])]).logits for lo, hi in ((0, 17), (17, 80), (80, 90))])
    assert torch.equal(alone, batched)
    assert torch.equal(alone, chunked)
