"""The quantizer contract fails quantizers that break it, and accepts a packed format."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hinge.builtin.no_quant import NoQuantizer
from hinge.builtin.plugin import NO_QUANTIZER
from hinge.layers.weights import linear_bias, linear_weight_loader, set_weight_attrs
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
