"""Core seams the nvfp4 plugin needed, kept generic: a parameter that only some partitions of a
fused layer store (``checkpoint_shards``), ``Quantizer.load_checkpoint_config`` called before the
model is built, compressed-tensors' ``format`` as a claimable method, plugin subcommands (hookspec
``register_commands``), and a quantizer's fused [gate | up] activation (``apply_gated``)."""

from __future__ import annotations

import argparse

import pytest
import torch

from hinge.contracts import Quantizer
from hinge.layers.weights import linear_bias, linear_parameter, set_weight_attrs
from hinge.plugins import QuantizerCapabilities
from hinge.plugins.checks import quant_config_methods
from hinge.plugins.commands import CommandSpec, add_plugin_commands, plugin_commands
from hinge.testing import build_linear, load_linear


class FirstPartitionScaled(Quantizer):
    """A plain weight, plus a scale that only partition 0's checkpoint holds."""

    capabilities = QuantizerCapabilities(claims_unquantized=True)

    def __init__(self):
        self.seen_config = None
        self.configured_before_build = None

    def load_checkpoint_config(self, config):
        self.seen_config = config

    def create_weights(self, layer, spec):
        if self.configured_before_build is None:
            self.configured_before_build = self.seen_config is not None
        layer.weight = linear_parameter(spec, (spec.output_size_per_partition, spec.input_size), spec.dtype)
        layer.bias = linear_bias(spec) if spec.bias else None
        scale = torch.nn.Parameter(torch.ones(1), requires_grad=False)
        layer.scale = set_weight_attrs(scale, weight_loader=lambda p, t, shard: p.data.copy_(t),
                                       checkpoint_shards=(0,) if len(spec.output_sizes) > 1 else None)

    def apply(self, layer, x):
        return torch.nn.functional.linear(x, layer.weight) * layer.scale


def test_a_tensor_of_some_partitions_is_routed_and_expected_for_those_only():
    layer = build_linear(FirstPartitionScaled(), 16, (8, 4), False, torch.float32, "cpu")
    routes = layer.checkpoint_routes("")
    assert "part0.scale" in routes and "part1.scale" not in routes
    load_linear(layer, [{"weight": torch.ones(8, 16), "scale": torch.tensor([2.0])},
                        {"weight": torch.ones(4, 16)}])  # part1 has no scale: not missing
    assert float(layer.scale) == 2.0


def test_load_model_tells_the_quantizer_the_checkpoint_config_before_building(tmp_path):
    from hinge.models import load_model
    from hinge.testing.checkpoints import make_tiny_checkpoint

    path = make_tiny_checkpoint("qwen3", tmp_path / "m")
    quantizer = FirstPartitionScaled()
    with pytest.raises(ValueError, match="unexpected|missing"):  # its fake scale is not in the files
        load_model(path, device="cpu", dtype=torch.float32, quantizer=quantizer, progress=False)
    assert quantizer.configured_before_build is True
    assert quantizer.seen_config.path == path


def test_compressed_tensors_format_is_a_claimable_method():
    config = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}
    assert quant_config_methods(config) == {"compressed-tensors", "nvfp4-pack-quantized"}


class FakeManager:
    """What ``plugin_commands`` reads of a plugin manager."""

    def __init__(self, impls):
        self.records = {}
        caller = type("Caller", (), {"get_hookimpls": lambda self: impls})()
        self.hook = type("Hook", (), {"register_commands": caller})()


def impl(plugin, *specs):
    def function(register):
        for spec in specs:
            register(spec)

    return type("Impl", (), {"plugin_name": plugin, "argnames": ("register",), "function": staticmethod(function)})()


def command(name):
    return CommandSpec(name, f"{name} help", lambda parser: parser.add_argument("--x"), lambda args: 7)


def test_plugin_commands_drop_a_name_two_plugins_register(caplog):
    pm = FakeManager([impl("a", command("go"), command("only-a")), impl("b", command("go"))])
    found = plugin_commands(pm)
    assert sorted(found) == ["only-a"] and found["only-a"][1] == "a"
    assert "'go' is registered by a and b" in caplog.text


def test_hinge_lists_the_installed_plugin_commands_and_refuses_its_own_names():
    parser = argparse.ArgumentParser(prog="hinge")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("generate")
    add_plugin_commands(sub)
    assert "quantize" in sub.choices  # hinge_nvfp4 registers it (installed with hinge-llm)


class GatedMarker:
    """A NoQuantizer whose gated path answers with a marked result (or declines: None) and
    counts its calls."""

    @staticmethod
    def build(answer: bool, deterministic: bool = False):
        import types

        from hinge.builtin.no_quant import NoQuantizer

        class Marked(NoQuantizer):
            calls = 0

            def apply_gated(self, layer, x, activation):
                type(self).calls += 1
                assert activation == "silu" and layer.spec.output_sizes == (48, 48)
                return torch.full((*x.shape[:-1], 48), 0.5, dtype=x.dtype) if answer else None

        return Marked(build=types.SimpleNamespace(deterministic=deterministic))


@pytest.mark.parametrize("answer", [True, False])
def test_the_mlp_takes_the_quantizers_gated_path_where_it_answers_and_its_own_activation_where_not(answer):
    import torch.nn.functional as F

    from hinge.layers.mlp import GatedMLP

    q = GatedMarker.build(answer)
    mlp = GatedMLP(32, 48, "silu", q, torch.float32, "mlp")
    gen = torch.Generator().manual_seed(0)
    for p in (mlp.gate_up_proj.weight, mlp.down_proj.weight):
        p.data = torch.randn(p.shape, generator=gen)
    x = torch.randn(3, 32, generator=gen)
    gu = F.linear(x, mlp.gate_up_proj.weight)
    inner = torch.full((3, 48), 0.5) if answer else F.silu(gu[:, :48]) * gu[:, 48:]
    assert torch.allclose(mlp(x), F.linear(inner, mlp.down_proj.weight), atol=1e-5)
    assert type(q).calls == 1


def test_the_deterministic_mlp_never_asks_for_the_gated_path():
    from hinge.layers.mlp import GatedMLP

    q = GatedMarker.build(True, deterministic=True)
    mlp = GatedMLP(32, 48, "silu", q, torch.float32, "mlp", deterministic=True)
    mlp(torch.randn(2, 32))
    assert type(q).calls == 0
