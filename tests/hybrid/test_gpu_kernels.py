"""fla-core's gated delta rule vs the torch reference, bf16 on CUDA (run on the GPU host)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
pytest.importorskip("fla", reason="needs fla-core (the gpu extra)")

from hinge.layers.recurrent_kernels import TorchRecurrentKernels, get_recurrent_kernels  # noqa: E402


def _inputs(lens, hk=4, hv=8, dk=64, dv=64, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t, b = sum(lens), len(lens)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    args = (
        rand(t, hk, dk).bfloat16(), rand(t, hk, dk).bfloat16(), rand(t, hv, dv).bfloat16(),
        torch.nn.functional.logsigmoid(rand(t, hv) + 3.0), torch.sigmoid(rand(t, hv)).bfloat16(),
        rand(b, hv, dk, dv) * 0.1,
    )
    return args, cu


def _rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


@pytest.mark.parametrize("lens", [[1, 17, 64, 65, 200], [1] * 16], ids=["prefill", "decode"])
def test_fla_kernels_match_the_torch_reference_in_bf16(lens):
    fla = get_recurrent_kernels("cuda", "fla")
    assert fla.name == "fla"
    args, cu = _inputs(lens)
    ref = TorchRecurrentKernels().gated_delta_rule(*args, cu)
    got = fla.gated_delta_rule(*args, cu)
    assert _rel(got.out, ref.out) < 2e-2
    assert _rel(got.final_state, ref.final_state) < 2e-2


def test_qwen3_5_model_with_fla_kernels_matches_torch_kernels_in_bf16(tmp_path):
    """Prefill (mixed lengths, chunked) then decode steps of a tiny Qwen3.5 on CUDA in bf16."""
    from hybrid_harness import StepHarness, load_hinge, make_hybrid_checkpoint

    path = make_hybrid_checkpoint(tmp_path, "Qwen3_5ForCausalLM", linear_key_head_dim=32,
                                  linear_value_head_dim=32)
    model = load_hinge(path, device="cuda", dtype=torch.bfloat16)
    prompts = {"a": list(range(3, 40)), "b": [5, 6, 7], "c": list(range(10, 90))}
    logits = {}
    for name, kernels in (("torch", TorchRecurrentKernels()), ("fla", get_recurrent_kernels("cuda", "fla"))):
        model.set_recurrent_kernels(kernels)
        harness = StepHarness(model)
        rows = [harness.step([("a", prompts["a"][:20]), ("b", prompts["b"]), ("c", prompts["c"])]).logits,
                harness.step([("a", prompts["a"][20:])]).logits]
        for step in range(4):
            rows.append(harness.step([(r, [11 + step]) for r in prompts]).logits)
        logits[name] = torch.cat(rows).float()
    assert _rel(logits["fla"], logits["torch"]) < 3e-2
