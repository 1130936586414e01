"""The quantizer contract fails quantizers that break it, and accepts a packed format."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hinge.builtin.no_quant import NoQuantizer
from hinge.builtin.plugin import NO_QUANTIZER
from hinge.layers.fused_moe import fused_experts
from hinge.layers.weights import (
    linear_bias,
    linear_parameter,
    linear_weight_loader,
    moe_parameter,
    set_weight_attrs,
)
from hinge.plugins import QuantizerCapabilities, QuantizerSpec
from hinge.plugins.specs import BuildContext
from hinge.testing import QuantizerContract


class DropsBias(NoQuantizer):
    def apply(self, layer, x):
        return F.linear(x, layer.weight)


class ClaimsEverything(NoQuantizer):
    def claims(self, quant_config):
        return True


class RowCountDependent(NoQuantizer):
    def apply(self, layer, x):
        return super().apply(layer, x) * (1 + 1e-6 * x.shape[0])


class GatedInFloat32(NoQuantizer):
    """A fused [gate | up] path done right: apply's output, silu in float32, one rounding."""

    def apply_gated(self, layer, x, activation):
        y = self.apply(layer, x).float()
        gate, up = y.chunk(2, dim=-1)
        return (gate / (1 + torch.exp(-gate)) * up).to(x.dtype)


class GatedSwapped(NoQuantizer):
    """Applies the activation to the wrong half: silu(up) * gate."""

    def apply_gated(self, layer, x, activation):
        gate, up = self.apply(layer, x).float().chunk(2, dim=-1)
        return (up / (1 + torch.exp(-up)) * gate).to(x.dtype)


class Int8Rows(NoQuantizer):
    """A toy packed format: int8 weights with one float scale per output row (both buffers,
    loaded by partition and rank through the generic linear loader); experts stay unquantized."""

    capabilities = QuantizerCapabilities(checkpoint_methods=frozenset({"int8-rows"}),
                                         dtypes=frozenset({"float32"}))

    def create_weights(self, layer, spec):
        rows, cols = spec.output_size_per_partition, spec.input_size_per_partition
        loader = linear_weight_loader(spec)
        layer.register_buffer("qweight", torch.zeros(rows, cols, dtype=torch.int8))
        set_weight_attrs(layer.qweight, weight_loader=loader, output_dim=0, input_dim=1)
        layer.register_buffer("scale", torch.zeros(rows, 1, dtype=spec.dtype))
        set_weight_attrs(layer.scale, weight_loader=loader, output_dim=0)
        layer.bias = linear_bias(spec) if spec.bias else None

    def apply(self, layer, x):
        return F.linear(x, layer.qweight.to(x.dtype) * layer.scale, layer.bias)


def pack_int4(weight):
    """Symmetric int4 with a scale per 16 inputs: two codes per byte, even input in the low nibble."""
    blocks = weight.reshape(*weight.shape[:-1], -1, 16)
    scale = blocks.abs().amax(-1).clamp_min(1e-8) / 7
    codes = (torch.round(blocks / scale[..., None]).clamp(-8, 7) + 8).to(torch.uint8).flatten(-2)
    return codes[..., 0::2] | (codes[..., 1::2] << 4), scale


def unpack_int4(packed, scale, dtype):
    codes = torch.stack([packed & 15, packed >> 4], dim=-1).flatten(-2).to(dtype) - 8
    return (codes.unflatten(-1, (-1, 16)) * scale.to(dtype)[..., None]).flatten(-2)


class Int4Blocks(NoQuantizer):
    """A toy NVFP4-shaped format for linears and experts: packed 4-bit codes (two per byte along
    the input) and one scale per 16 inputs, placed and split by the generic loaders."""

    capabilities = QuantizerCapabilities(checkpoint_methods=frozenset({"int4-blocks"}),
                                         dtypes=frozenset({"float32"}))

    def create_weights(self, layer, spec):
        n, k = spec.output_size_per_partition, spec.input_size_per_partition
        layer.qweight = linear_parameter(spec, (n, k // 2), torch.uint8)
        layer.scale = linear_parameter(spec, (n, k // 16), torch.float32)
        layer.bias = linear_bias(spec) if spec.bias else None

    def apply(self, layer, x):
        return F.linear(x, unpack_int4(layer.qweight, layer.scale, x.dtype), layer.bias)

    def create_moe_weights(self, layer, spec):
        e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size_per_partition
        layer.w13_qweight = moe_parameter(spec, (e, 2 * i, h // 2), torch.uint8)
        layer.w13_scale = moe_parameter(spec, (e, 2 * i, h // 16), torch.float32)
        layer.w2_qweight = moe_parameter(spec, (e, h, i // 2), torch.uint8)
        layer.w2_scale = moe_parameter(spec, (e, h, i // 16), torch.float32)

    def apply_moe(self, layer, x, topk_ids, topk_weights):
        w13 = unpack_int4(layer.w13_qweight, layer.w13_scale, x.dtype)
        w2 = unpack_int4(layer.w2_qweight, layer.w2_scale, x.dtype)
        return fused_experts(x, w13, w2, topk_ids, topk_weights, deterministic=self.deterministic)


class TestInt4BlocksPassesTheContract(QuantizerContract):
    """Packed weights and block scales of fused layers, tensor-parallel ranks and whole expert sets."""

    @pytest.fixture
    def spec(self):
        return QuantizerSpec(name="int4-blocks", factory=Int4Blocks, capabilities=Int4Blocks.capabilities)

    def checkpoint_tensors(self, weight, bias, dtype):
        packed, scale = pack_int4(weight)
        tensors = {"qweight": packed, "scale": scale}
        if bias is not None:
            tensors["bias"] = bias.to(dtype)
        return tensors, unpack_int4(packed, scale, dtype)


class WholeTensorLoader(NoQuantizer):
    """Ignores partitions and ranks: every checkpoint tensor is copied over the whole parameter."""

    def create_weights(self, layer, spec):
        super().create_weights(layer, spec)

        def load(param, tensor, shard_id=None):
            rows = min(param.shape[0], tensor.shape[0])
            param.data[:rows].copy_(tensor[:rows, : param.shape[-1]] if tensor.dim() > 1 else tensor[:rows])

        layer.weight.weight_loader = load


class IgnoresRoutingWeights(NoQuantizer):
    def apply_moe(self, layer, x, topk_ids, topk_weights):
        return super().apply_moe(layer, x, topk_ids, torch.ones_like(topk_weights))


class RowCountDependentExperts(NoQuantizer):
    def apply_moe(self, layer, x, topk_ids, topk_weights):
        return super().apply_moe(layer, x, topk_ids, topk_weights) * (1 + 1e-6 * x.shape[0])


def quantizer_spec(cls, **caps):
    return QuantizerSpec(name="toy", factory=lambda options, build: cls(options, build),
                         capabilities=QuantizerCapabilities(**caps))


class TestInt8RowsPassesTheContract(QuantizerContract):
    @pytest.fixture
    def spec(self):
        return QuantizerSpec(name="int8-rows", factory=Int8Rows, capabilities=Int8Rows.capabilities)

    def checkpoint_tensors(self, weight, bias, dtype):
        scale = weight.abs().amax(dim=1, keepdim=True) / 127
        q = torch.round(weight / scale).to(torch.int8)
        tensors = {"qweight": q, "scale": scale.to(dtype)}
        if bias is not None:
            tensors["bias"] = bias.to(dtype)
        return tensors, q.to(dtype) * scale.to(dtype)


def _contract(cls, **caps):
    contract = QuantizerContract()
    spec = quantizer_spec(cls, **caps)
    return contract, spec, spec.build(None, None)


def test_a_quantizer_that_drops_the_bias_fails():
    contract, _, q = _contract(DropsBias)
    with pytest.raises(AssertionError, match="differs from the reference linear"):
        contract.test_apply_matches_reference_linear(q, torch.float32, "cpu")


def test_a_gated_path_on_the_wrong_half_fails_and_a_float32_one_passes():
    contract, _, q = _contract(GatedSwapped)
    with pytest.raises(AssertionError, match="differs from silu.gate. . up of apply's output"):
        contract.test_a_gated_answer_is_the_activation_of_apply_rounded_once(q, torch.float32, "cpu")
    _, _, good = _contract(GatedInFloat32)
    for dtype in (torch.float32, torch.bfloat16):
        contract._check_gated(good, dtype, "cpu")


def test_a_quantizer_without_a_gated_path_is_skipped_by_the_gated_check():
    contract, _, q = _contract(NoQuantizer)
    with pytest.raises(pytest.skip.Exception, match="declines every call"):
        contract.test_a_gated_answer_is_the_activation_of_apply_rounded_once(q, torch.float32, "cpu")


def test_a_quantizer_claiming_unknown_methods_fails():
    contract, spec, q = _contract(ClaimsEverything, checkpoint_methods=frozenset({"fp8"}))
    with pytest.raises(AssertionError, match="claims an unknown quant_method"):
        contract.test_claims_exactly_what_it_declares(spec, q)


def test_claims_unquantized_must_match_claims_none():
    contract = QuantizerContract()
    spec = NO_QUANTIZER.model_copy(update={"capabilities": QuantizerCapabilities()})
    with pytest.raises(AssertionError, match="claims_unquantized = False"):
        contract.test_claims_exactly_what_it_declares(spec, NoQuantizer())


def test_a_batch_invariance_claim_fails_when_rows_depend_on_the_batch():
    contract, spec, _ = _contract(RowCountDependent, batch_invariant=True)
    with pytest.raises(AssertionError, match="changed with batch size"):
        contract.test_batch_invariant_claim_holds(
            spec, lambda **kw: RowCountDependent(None, None), torch.float32, "cpu")


def test_a_loader_that_ignores_partitions_fails_the_fused_layer_check():
    contract, _, q = _contract(WholeTensorLoader)
    with pytest.raises(AssertionError, match="differs from the reference linear"):
        contract.test_fused_layer_loads_every_partition_and_matches_reference(q, torch.float32, "cpu")


def test_a_loader_that_ignores_ranks_fails_the_tensor_parallel_check():
    contract, spec, _ = _contract(WholeTensorLoader)
    build = lambda **kw: spec.build(None, BuildContext("cpu", torch.float32, False, 16, **kw))  # noqa: E731
    with pytest.raises(AssertionError, match="column-parallel rank"):
        contract.test_column_parallel_rank_holds_its_rows_of_every_partition(build, torch.float32, "cpu")


def test_experts_that_ignore_routing_weights_fail_the_per_expert_reference():
    contract, _, q = _contract(IgnoresRoutingWeights)
    with pytest.raises(AssertionError, match="differs from the per-expert reference"):
        contract.test_experts_match_per_expert_reference(q, torch.float32, "cpu")


def test_an_expert_batch_invariance_claim_fails_when_rows_depend_on_the_batch():
    contract, spec, _ = _contract(RowCountDependentExperts, batch_invariant=True)
    with pytest.raises(AssertionError, match="expert rows .* changed with batch size"):
        contract.test_experts_batch_invariant_claim_holds(
            spec, lambda **kw: RowCountDependentExperts(None, None), torch.float32, "cpu")


def test_claims_follow_the_declared_capabilities_through_one_rule():
    """``claims`` is the rule ``quantizer = auto`` uses: declared methods, case-insensitive, and
    modelopt's hf_quant_config.json form."""
    q = Int8Rows(None, None)
    assert q.claims({"quant_method": "INT8-ROWS"}) and not q.claims(None)
    assert not q.claims({"quantization": {"quant_algo": "NVFP4"}})
    assert NoQuantizer().claims(None) and not NoQuantizer().claims({"quant_method": "int8-rows"})
