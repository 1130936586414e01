"""Loading NVFP4 checkpoints: ModelOpt's own export, exclude globs, mixed fused layers, the
compressed-tensors layout, weight-only checkpoints, FP8 KV scales, and malformed files."""

from __future__ import annotations

import json

import pytest
import torch
from nvfp4_helpers import (
    FIXTURES,
    copy_checkpoint,
    dequantized_oracle,
    edit_tensors,
    logits,
    nvfp4,
    plain,
)

from hinge.models import load_model
from hinge_nvfp4 import format as fp4

PROMPTS = [list(range(2, 30)), [5, 9, 77, 3, 120, 64, 31]]


def load(path, quantizer=None):
    return load_model(path, device="cpu", dtype=torch.float32, quantizer=quantizer or nvfp4(), progress=False)


def assert_same_as_oracle(path, tmp_path):
    """hinge's NVFP4 model gives the logits of the plain model with the dequantized weights."""
    oracle = load(dequantized_oracle(path, tmp_path / "oracle"), plain())
    got, expected = logits(load(path), PROMPTS), logits(oracle, PROMPTS)
    assert float((got - expected).abs().max()) < 1e-4


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_modelopt_export_loads_and_equals_its_dequantized_weights(arch, tmp_path):
    assert_same_as_oracle(FIXTURES / arch / "modelopt", tmp_path)


def test_quantizer_auto_picks_nvfp4_for_modelopt_and_compressed_tensors(tmp_path):
    from hinge.config import EngineConfig
    from hinge.plugins.checks import resolve_quantizer_name
    from hinge.plugins.manager import get_plugin_manager

    pm = get_plugin_manager()
    ct = to_compressed_tensors(FIXTURES / "qwen3" / "modelopt", tmp_path / "ct")
    for path in (FIXTURES / "qwen3" / "modelopt", ct):
        assert resolve_quantizer_name(EngineConfig(model=str(path)), pm, None) == "nvfp4"


def test_fp8_kv_scales_are_read_and_kept_on_the_qkv_layer():
    model = load(FIXTURES / "qwen3" / "modelopt")
    from safetensors.torch import load_file

    stored = load_file(FIXTURES / "qwen3" / "modelopt" / "model.safetensors")
    qkv = model.model.layers[1].self_attn.qkv_proj
    assert float(qkv.k_scale) == float(stored["model.layers.1.self_attn.k_proj.k_scale"])
    assert float(qkv.v_scale) == float(stored["model.layers.1.self_attn.v_proj.v_scale"])


def dequantize_modules(path, modules):
    """Store ``modules`` (checkpoint linears) as plain bf16 and list them in exclude_modules."""
    def edit(tensors):
        for m in modules:
            w = fp4.dequantize(tensors[m + ".weight"], tensors[m + ".weight_scale"], tensors[m + ".weight_scale_2"])
            for suffix in (".weight_scale", ".weight_scale_2", ".input_scale"):
                tensors.pop(m + suffix)
            tensors[m + ".weight"] = w.to(torch.bfloat16)
        return tensors

    edit_tensors(path, edit)
    quant = json.loads((path / "hf_quant_config.json").read_text())
    return quant


def test_excluded_modules_by_glob_load_plain_also_inside_a_fused_layer(tmp_path):
    """``*.down_proj`` excluded everywhere; ``k_proj`` excluded inside the fused q|k|v layer."""
    path = copy_checkpoint(FIXTURES / "qwen3" / "modelopt", tmp_path / "ckpt")
    downs = [f"model.layers.{i}.mlp.down_proj" for i in range(2)]
    ks = [f"model.layers.{i}.self_attn.k_proj" for i in range(2)]
    quant = dequantize_modules(path, downs + ks)
    quant["quantization"]["exclude_modules"] += ["model.layers.*.mlp.down_proj", "*self_attn.k_proj"]
    (path / "hf_quant_config.json").write_text(json.dumps(quant))
    model = load(path)
    layer = model.model.layers[0]
    assert layer.mlp.down_proj.weight.dtype == torch.float32 and not layer.mlp.down_proj.nvfp4_parts
    assert layer.self_attn.qkv_proj.nvfp4_parts == (0, 2) and layer.self_attn.qkv_proj.plain_parts == (1,)
    oracle = load(dequantized_oracle(path, tmp_path / "oracle"), plain())
    assert float((logits(model, PROMPTS) - logits(oracle, PROMPTS)).abs().max()) < 1e-3


def to_compressed_tensors(src, dst):
    """The same codes in compressed-tensors' NVFP4 layout (names of llm-compressor's
    ``nvfp4-pack-quantized`` format, global scales as reciprocals, shape (1,))."""
    copy_checkpoint(src, dst)
    (dst / "hf_quant_config.json").unlink()

    def edit(tensors):
        out = {}
        for name, t in tensors.items():
            if name.endswith((".k_scale", ".v_scale")):
                continue
            if name.endswith(".weight") and t.dtype == torch.uint8:
                out[name[: -len(".weight")] + ".weight_packed"] = t
            elif name.endswith(".weight_scale_2"):
                out[name[: -len("_scale_2")] + "_global_scale"] = (1.0 / t).reshape(1)
            elif name.endswith(".input_scale"):
                out[name[: -len("_scale")] + "_global_scale"] = (1.0 / t).reshape(1)
            else:
                out[name] = t
        return out

    edit_tensors(dst, edit)
    config = json.loads((dst / "config.json").read_text())
    group = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
             "symmetric": True, "dynamic": False}
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": group,
                                      "input_activations": {**group, "dynamic": "local"},
                                      "format": "nvfp4-pack-quantized"}},
        "ignore": ["lm_head"], "kv_cache_scheme": None, "quantization_status": "compressed"}
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_compressed_tensors_layout_gives_the_modelopt_results(arch, tmp_path):
    ct = to_compressed_tensors(FIXTURES / arch / "modelopt", tmp_path / "ct")
    got, expected = logits(load(ct), PROMPTS), logits(load(FIXTURES / arch / "modelopt"), PROMPTS)
    assert float((got - expected).abs().max()) < 1e-4


def test_weight_only_checkpoint_loads_and_refuses_w4a4(tmp_path):
    path = copy_checkpoint(FIXTURES / "qwen3" / "modelopt", tmp_path / "w4a16")
    edit_tensors(path, lambda t: {k: v for k, v in t.items() if not k.endswith(".input_scale")})
    quant = json.loads((path / "hf_quant_config.json").read_text())
    quant["quantization"]["quant_algo"] = "W4A16_NVFP4"
    (path / "hf_quant_config.json").write_text(json.dumps(quant))
    load(path)
    with pytest.raises(ValueError, match="w4a4 needs the checkpoint's input_scale"):
        load(path, nvfp4(activations="w4a4"))


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("model.layers.0.self_attn.o_proj.weight_scale"),
     "missing from the checkpoint.*model.layers.0.self_attn.o_proj.weight_scale"),
    (lambda t: t.update({"model.layers.1.mlp.up_proj.weight_scale":
                         t["model.layers.1.mlp.up_proj.weight_scale"].float()}),
     "tensor model.layers.1.mlp.up_proj.weight_scale has dtype torch.float32, an NVFP4 block scale is"),
    (lambda t: t.update({"model.layers.0.mlp.down_proj.weight": t["model.layers.0.mlp.down_proj.weight"][:, :32].contiguous()}),
     "tensor model.layers.0.mlp.down_proj.weight has shape"),
    (lambda t: t.update({"model.layers.0.self_attn.q_proj.weight_scale_2": torch.ones(2)}),
     "tensor model.layers.0.self_attn.q_proj.weight_scale_2 has shape"),
    (lambda t: t["model.layers.1.self_attn.k_proj.weight_scale"].view(torch.uint8)[2, 1].fill_(0xB8),
     r"tensor model.layers.1.self_attn.k_proj.weight_scale has block scale -1.0 at \[2, 1\]; .*not negative"),
    (lambda t: t["model.layers.0.mlp.gate_proj.weight_scale"].view(torch.uint8)[0, 0].fill_(0x7F),
     r"tensor model.layers.0.mlp.gate_proj.weight_scale has block scale nan at \[0, 0\]; .*re-export"),
])
def test_malformed_checkpoint_is_refused_naming_the_tensor(change, message, tmp_path):
    path = copy_checkpoint(FIXTURES / "qwen3" / "modelopt", tmp_path / "bad")

    def edit(tensors):
        change(tensors)
        return tensors

    edit_tensors(path, edit)
    with pytest.raises(ValueError, match=message):
        load(path)


def test_a_negative_expert_block_scale_is_refused_naming_the_tensor(tmp_path):
    path = copy_checkpoint(FIXTURES / "qwen3_moe" / "modelopt", tmp_path / "bad")
    name = "model.layers.0.mlp.experts.1.up_proj.weight_scale"

    def edit(tensors):
        tensors[name].view(torch.uint8)[3, 0] = 0xC0  # -2.0
        return tensors

    edit_tensors(path, edit)
    with pytest.raises(ValueError, match=rf"tensor {name} has block scale -2.0 at \[3, 0\]"):
        load(path)


def test_unsupported_quant_algo_is_refused_with_the_supported_ones(tmp_path):
    path = copy_checkpoint(FIXTURES / "qwen3" / "modelopt", tmp_path / "awq")
    quant = json.loads((path / "hf_quant_config.json").read_text())
    quant["quantization"]["quant_algo"] = "NVFP4_AWQ"
    (path / "hf_quant_config.json").write_text(json.dumps(quant))
    with pytest.raises(ValueError, match="NVFP4_AWQ.*supported: NVFP4, W4A16_NVFP4"):
        load(path, nvfp4())
