"""Loading local HF directories: safetensors only, clear errors naming the file or tensor."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from model_oracle import build_context, load_hinge
from safetensors.torch import load_file, save_file

from hinge.builtin.no_quant import NoQuantizer
from hinge.layers.linear import Linear
from hinge.models.loader import load_config, load_model


@pytest.fixture
def ckpt(tiny_checkpoint, tmp_path):
    """A private copy of the tiny Qwen3 checkpoint that a test may damage."""
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("qwen3"), dst)
    return dst


def test_unknown_architecture_names_it_the_file_and_the_supported_list(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["architectures"] = ["FooForCausalLM"]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as err:
        load_hinge(ckpt)
    msg = str(err.value)
    assert "FooForCausalLM" in msg and str(ckpt / "config.json") in msg
    assert "Qwen3ForCausalLM" in msg and "LlamaForCausalLM" in msg and "Qwen3MoeForCausalLM" in msg


def test_missing_config_json_names_the_file(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hinge(ckpt)


def test_invalid_config_json_names_the_file(ckpt):
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load_hinge(ckpt)


def test_missing_safetensors_names_the_expected_files(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hinge(ckpt)


def test_corrupt_safetensors_names_the_file(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError) as err:
        load_hinge(ckpt)
    assert str(ckpt / "model.safetensors") in str(err.value)


def test_pickle_only_directory_is_refused_with_a_conversion_hint(ckpt):
    (ckpt / "model.safetensors").unlink()
    (ckpt / "pytorch_model.bin").write_bytes(b"not unpickled: hinge must never open this")
    with pytest.raises(ValueError) as err:
        load_hinge(ckpt)
    msg = str(err.value)
    assert "pytorch_model.bin" in msg and "safetensors only" in msg and "save_pretrained" in msg


def test_sharded_checkpoint_loads_the_same_weights_as_a_single_file(tiny_checkpoint, tmp_path):
    from hinge.testing.checkpoints import make_tiny_checkpoint

    sharded = make_tiny_checkpoint("qwen3", tmp_path / "sharded", max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    a, b = load_hinge(sharded), load_hinge(tiny_checkpoint("qwen3"))
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name


def test_sharded_checkpoint_with_a_missing_shard_names_it(tmp_path):
    from hinge.testing.checkpoints import make_tiny_checkpoint

    sharded = make_tiny_checkpoint("qwen3", tmp_path / "sharded", max_shard_size="40KB")
    victim = sorted(sharded.glob("model-*.safetensors"))[0]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name):
        load_hinge(sharded)


def test_missing_and_unexpected_tensors_are_listed(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.1.mlp.bogus.weight"] = torch.zeros(2)
    save_file(tensors, ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError) as err:
        load_hinge(ckpt)
    msg = str(err.value)
    assert "missing" in msg and "model.layers.1.mlp.up_proj.weight" in msg
    assert "unexpected" in msg and "model.layers.1.mlp.bogus.weight" in msg


def test_shape_mismatch_names_tensor_and_both_shapes(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(7)
    save_file(tensors, ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model.norm.weight has shape \(7,\).*\(64,\)"):
        load_hinge(ckpt)


def test_a_mis_shaped_partition_of_a_fused_layer_names_the_checkpoint_tensor(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(31, 64)
    save_file(tensors, ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"tensor model.layers.0.self_attn.k_proj.weight has shape \(31, 64\), "
                       r"the model expects \(32, 64\) for model.layers.0.self_attn.qkv_proj.weight \(partition 1\)"):
        load_hinge(ckpt)


@pytest.fixture
def moe_ckpt(tiny_checkpoint, tmp_path):
    dst = tmp_path / "moe"
    shutil.copytree(tiny_checkpoint("qwen3_moe"), dst)
    return dst


def test_missing_and_mis_shaped_expert_tensors_are_named_per_expert(moe_ckpt):
    tensors = load_file(moe_ckpt / "model.safetensors")
    del tensors["model.layers.2.mlp.experts.3.up_proj.weight"]
    save_file(tensors, moe_ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing from the checkpoint.*model.layers.2.mlp.experts.3.up_proj.weight"):
        load_hinge(moe_ckpt)
    tensors["model.layers.2.mlp.experts.3.up_proj.weight"] = torch.zeros(32, 64)
    tensors["model.layers.0.mlp.experts.5.down_proj.weight"] = torch.zeros(64, 31)
    save_file(tensors, moe_ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"tensor model.layers.0.mlp.experts.5.down_proj.weight has shape \(64, 31\), "
                       r"the model expects \(64, 32\) for model.layers.0.mlp.experts.w2_weight \(partition w2, expert 5\)"):
        load_hinge(moe_ckpt)


def test_an_expert_beyond_num_experts_is_unexpected(moe_ckpt):
    tensors = load_file(moe_ckpt / "model.safetensors")
    tensors["model.layers.0.mlp.experts.8.gate_proj.weight"] = torch.zeros(32, 64)
    save_file(tensors, moe_ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="unexpected in the checkpoint.*experts.8.gate_proj.weight"):
        load_hinge(moe_ckpt)


def test_tied_embeddings_share_one_parameter(tiny_checkpoint):
    model = load_hinge(tiny_checkpoint("qwen3"))
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_progress_bar_is_shown_only_when_asked(tiny_checkpoint, capsys):
    build = build_context()
    kwargs = dict(device="cpu", dtype=torch.float32, quantizer=NoQuantizer(None, build))
    load_model(tiny_checkpoint("llama"), progress=False, **kwargs)
    assert "safetensors file" not in capsys.readouterr().err
    load_model(tiny_checkpoint("llama"), progress=True, **kwargs)
    err = capsys.readouterr().err
    assert "Loading 1 safetensors file(s)" in err and "tensor" in err


class RecordingQuantizer(NoQuantizer):
    def __init__(self):
        super().__init__(None, build_context())
        self.created, self.processed, self.experts = [], [], []

    def create_weights(self, layer, spec):
        self.created.append(spec)
        super().create_weights(layer, spec)

    def process_weights_after_loading(self, layer):
        assert not torch.isnan(layer.weight).any(), f"{layer.prefix} processed before loading"
        self.processed.append(layer.prefix)

    def process_moe_weights_after_loading(self, layer):
        assert not torch.isnan(layer.w13_weight).any(), f"{layer.spec.prefix} processed before loading"
        self.experts.append(layer.spec.prefix)


def test_quantizer_creates_and_post_processes_every_linear_and_expert_set_after_loading(tiny_checkpoint):
    quantizer = RecordingQuantizer()
    model = load_model(
        tiny_checkpoint("qwen3_moe"), device="cpu", dtype=torch.float32, quantizer=quantizer, progress=False
    )
    linears = [m.prefix for m in model.modules() if isinstance(m, Linear)]
    assert sorted(s.prefix for s in quantizer.created) == sorted(linears) == sorted(quantizer.processed)
    assert quantizer.experts == ["model.layers.0.mlp.experts", "model.layers.2.mlp.experts"]
    specs = {s.prefix: s for s in quantizer.created}
    qkv = specs["model.layers.0.self_attn.qkv_proj"]  # q | k | v: one GEMM, checkpoint names kept
    assert qkv.output_sizes == (64, 32, 32) and qkv.parallel == "column"
    assert qkv.shard_names == tuple(f"model.layers.0.self_attn.{n}_proj" for n in "qkv")
    gate_up = specs["model.layers.1.mlp.gate_up_proj"]  # mlp_only_layers=[1] keeps a dense MLP
    assert gate_up.shard_names == ("model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj")
    assert specs["model.layers.1.mlp.down_proj"].parallel == "row"


def test_loads_in_bfloat16_when_asked(tiny_checkpoint):
    build = build_context()
    model = load_model(
        tiny_checkpoint("llama"), device="cpu", dtype=torch.bfloat16, quantizer=NoQuantizer(None, build),
        progress=False,
    )
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_config_reads_eos_from_generation_config(ckpt):
    (ckpt / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 5]}))
    _, config = load_config(ckpt)
    assert config.eos_token_ids == [3, 5]
    assert config.architectures == ["Qwen3ForCausalLM"]
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (256, 64, 2)
    assert config.max_position_embeddings == 512


class ScaleBufferQuantizer(NoQuantizer):
    """A persistent buffer per linear with one scale per partition (its own weight loader), and
    KV-cache scales (``*.k_scale``) ignored through the declared ``map_checkpoint_name``."""

    def create_weights(self, layer, spec):
        super().create_weights(layer, spec)
        layer.register_buffer("weight_scale", torch.full((len(spec.output_sizes),), float("nan")))

        def load(param, tensor, shard_id):
            param.data[shard_id] = tensor[0]

        layer.weight_scale.weight_loader = load

    def map_checkpoint_name(self, name):
        return None if name.endswith(".k_scale") else name


def test_quantizer_buffers_load_per_partition_and_quantizer_may_ignore_tensors(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    linears = sorted(k.removesuffix(".weight") for k in tensors if "proj.weight" in k)
    for i, name in enumerate(linears):
        tensors[f"{name}.weight_scale"] = torch.tensor([float(i)])
    tensors["model.layers.0.self_attn.k_proj.k_scale"] = torch.tensor(1.0)
    save_file(tensors, ckpt / "model.safetensors", metadata={"format": "pt"})
    model = load_model(ckpt, device="cpu", dtype=torch.float32,
                       quantizer=ScaleBufferQuantizer(None, build_context()), progress=False)
    scales = {}
    for m in model.modules():
        if isinstance(m, Linear):
            scales.update(zip(m.spec.shard_names, m.weight_scale.tolist(), strict=True))
    assert scales == {name: float(i) for i, name in enumerate(linears)}


def test_a_quantizer_without_the_declared_hook_cannot_ignore_tensors(ckpt):
    """The loader calls only declared hooks: an undeclared ``checkpoint_param_name`` is not asked."""

    class Undeclared(NoQuantizer):
        def checkpoint_param_name(self, name):
            return None

    tensors = load_file(ckpt / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.k_scale"] = torch.tensor(1.0)
    save_file(tensors, ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="unexpected.*k_proj.k_scale"):
        load_model(ckpt, device="cpu", dtype=torch.float32, quantizer=Undeclared(None, build_context()),
                   progress=False)


def test_quantized_checkpoint_is_refused_by_the_none_quantizer(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="NoQuantizer does not claim.*modelopt.*hinge plugins"):
        load_hinge(ckpt)


def test_hf_quant_config_json_is_read_into_the_model_config(ckpt):
    (ckpt / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    _, config = load_config(ckpt)
    assert config.hf_quant_config == {"quantization": {"quant_algo": "NVFP4"}}
    assert config.checkpoint_quant_config == config.hf_quant_config
    with pytest.raises(ValueError, match="does not claim"):
        load_hinge(ckpt)
