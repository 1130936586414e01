"""End to end on CPU: tiny Qwen3, tiny Qwen3-MoE and the embedded default hybrid (Qwen3.5),
quantized by ``hinge quantize`` (calibrated through hinge), generate through the engine with
logits close to the bf16 model's (W4A16 and W4A4 emulation); deterministic logprobs are the
same alone and batched. KL / top-1 bounds: measured on this machine (docs/nvfp4.md), with room."""

from __future__ import annotations

import pytest
import torch
from nvfp4_helpers import kl_and_top1

from hinge import LLM, SamplingParams, default_model_path
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer
from hinge_nvfp4.export import quantize_checkpoint

PROMPTS = ["def fibonacci(n):\n    return", "import os\nfor x in range(10):\n", "class Foo:\n    def __init__(self"]
#: arch -> (largest mean KL(bf16 || nvfp4), smallest top-1 agreement), W4A16; measured values in docs/nvfp4.md
BOUNDS = {"qwen3": (0.6, 0.45), "qwen3_moe": (2.0, 0.15), "default": (0.3, 0.7)}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """arch -> (bf16 source, its NVFP4 quantization by `hinge quantize`)."""
    root, out = tmp_path_factory.mktemp("e2e"), {}
    for arch in BOUNDS:
        if arch == "default":
            src = default_model_path()
        else:
            src = make_tiny_checkpoint(arch, root / arch, vocab_size=256)
            write_byte_tokenizer(src)
        dst = root / f"{arch}-nvfp4"
        quantize_checkpoint(src, dst, calib_samples=4, progress=False)  # what `hinge quantize` runs
        out[arch] = (src, dst)
    return out


def engine_logits(path, quantizer: str, **options) -> tuple[torch.Tensor, list[str]]:
    """Every prompt position's logits through the engine (a hook on the LM head) and a greedy
    continuation of each prompt."""
    with LLM(str(path), dtype="bfloat16", quantizer=quantizer, **options) as llm:
        rows = []
        hook = llm.engine.model.lm_head.register_forward_hook(lambda m, a, out: rows.append(out.float()))
        for prompt in PROMPTS:
            llm.generate([prompt], SamplingParams(max_new_tokens=1, prompt_logprobs_start=0))
        hook.remove()
        texts = [o.text for o in llm.generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0.0))]
    return torch.cat(rows), texts


@pytest.mark.parametrize("arch", list(BOUNDS))
def test_quantized_model_generates_with_logits_close_to_bf16(arch, checkpoints):
    src, dst = checkpoints[arch]
    ref, _ = engine_logits(src, "none")
    got, texts = engine_logits(dst, "auto")
    kl, top1 = kl_and_top1(got, ref)
    print(f"{arch} w4a16: KL {kl:.4f} top-1 {top1:.3f}")
    max_kl, min_top1 = BOUNDS[arch]
    assert kl <= max_kl and top1 >= min_top1, (kl, top1)
    assert all(len(t) > 0 for t in texts)
    emulated, _ = engine_logits(dst, "auto", quantizer_options={"activations": "w4a4"})
    kl4, top14 = kl_and_top1(emulated, ref)
    print(f"{arch} w4a4: KL {kl4:.4f} top-1 {top14:.3f}")
    assert kl4 <= 2 * max_kl and not torch.equal(emulated, got), "w4a4 emulation must change the numbers"


@pytest.mark.parametrize("arch", ["qwen3_moe", "default"])
def test_deterministic_logprobs_are_identical_alone_and_batched(arch, checkpoints):
    _, dst = checkpoints[arch]
    params = SamplingParams(max_new_tokens=8, temperature=0.0, logprobs=True)
    with LLM(str(dst), dtype="bfloat16", deterministic=True) as llm:
        alone = [llm.generate([p], params)[0] for p in PROMPTS]
        batched = llm.generate(PROMPTS, params)
    for a, b in zip(alone, batched, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def mma_sized_checkpoint(tmp_path):
    """A tiny Qwen3 the MMA GEMV takes (N % 16 == 0, K % 128 == 0), quantized by hinge."""
    src = make_tiny_checkpoint("qwen3", tmp_path / "src", hidden_size=256, intermediate_size=512,
                               head_dim=64, num_attention_heads=4, num_key_value_heads=2)
    write_byte_tokenizer(src)
    quantize_checkpoint(src, tmp_path / "nvfp4", calib_samples=2, progress=False)
    return tmp_path / "nvfp4"


@pytest.mark.gpu
def test_cuda_kernel_mma_decodes_the_same_bits_with_the_gated_gemv_and_early_launches_as_without(
        tmp_path, monkeypatch):
    # a tiny Qwen3 the MMA GEMV takes (K % 128 == 0): greedy tokens and logprobs through the
    # engine's CUDA graphs with silu_mul fused into gate_up and programmatic dependent launch,
    # and with neither (HINGE_NVFP4_MMA_GATED=0, HINGE_PDL=0): bit for bit, since the fused
    # epilogue computes silu_mul's bits and early launches wait for their inputs; at batch 3
    # and at batch 12 (the 16-row kernels, padded rows included)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a CUDA GPU of compute capability >= 9.0")
    dst = mma_sized_checkpoint(tmp_path)
    params = SamplingParams(max_new_tokens=16, temperature=0.0, logprobs=True)
    runs = {}
    for label, gated, pdl in (("fused", "1", "1"), ("unfused", "0", "0")):
        monkeypatch.setenv("HINGE_NVFP4_MMA_GATED", gated)
        monkeypatch.setenv("HINGE_PDL", pdl)
        with LLM(str(dst), device="cuda", dtype="bfloat16", quantizer_options={"kernel": "mma"}) as llm:
            pairs = {m.nvfp4_mma_pairs for name, m in llm.engine.model.named_modules()
                     if name.endswith("gate_up_proj")}
            assert pairs == ({32} if gated == "1" else {0}), pairs
            runs[label] = [(o.token_ids, o.logprobs) for prompts in (PROMPTS, PROMPTS * 4)
                           for o in llm.generate(prompts, params)]
    assert runs["fused"] == runs["unfused"]


@pytest.mark.gpu
def test_cuda_auto_runs_mma_on_hopper_frees_the_codes_and_prefills_with_the_triton_kernels_bits(tmp_path):
    # bf16, default mode, w4a16 on sm_90: kernel auto is mma; every linear's checkpoint codes are
    # freed (the repack serves every row count); a 100-token prefill dequantizes each weight from
    # the repack (>= prefill_dequant_rows 64), which has the bits the Triton kernel dequantizes
    # from the checkpoint's codes: the first token's logprob is the same bit for bit
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (where auto picks mma)")
    dst = mma_sized_checkpoint(tmp_path)
    prompt = [[(5 * i) % 200 + 3 for i in range(100)]]
    params = SamplingParams(max_new_tokens=8, temperature=0.0, logprobs=True)
    runs = {}
    for kernel in ("auto", "triton"):
        options = {} if kernel == "auto" else {"kernel": kernel}
        with LLM(str(dst), device="cuda", dtype="bfloat16", quantizer_options=options, cache="none") as llm:
            layers = [m for name, m in llm.engine.model.named_modules() if name.endswith("_proj")
                      and getattr(m, "nvfp4_parts", None)]
            assert layers, "no NVFP4 linear layers"
            assert {m.quantizer.kernel.name for m in layers} == {"mma" if kernel == "auto" else "triton"}
            freed = {m.weight.numel() == 0 for m in layers}
            assert freed == ({True} if kernel == "auto" else {False}), (kernel, freed)
            runs[kernel] = llm.generate(prompt, params)[0]
    assert runs["auto"].logprobs[0] == runs["triton"].logprobs[0]
    assert runs["auto"].token_ids[0] == runs["triton"].token_ids[0]
