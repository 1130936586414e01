"""The quantizer contract fails quantizers that break it, and accepts a packed format."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hinge.builtin.no_quant import NoQuantizer
from hinge.builtin.plugin import NO_QUANTIZER
from hinge.plugins import QuantizerCapabilities, QuantizerSpec
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
    """A toy packed format: int8 weights with one float scale per output row."""

    def claims(self, quant_config):
        return (quant_config or {}).get("quant_method") == "int8-rows"

    def create_weights(self, layer, in_features, out_features, bias, dtype):
        layer.register_buffer("qweight", torch.zeros(out_features, in_features, dtype=torch.int8))
        layer.register_buffer("scale", torch.zeros(out_features, 1, dtype=dtype))
        layer.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False) if bias else None

    def apply(self, layer, x):
        return F.linear(x, layer.qweight.to(x.dtype) * layer.scale, layer.bias)


def quantizer_spec(cls, **caps):
    return QuantizerSpec(name="toy", factory=lambda options, build: cls(options, build),
                         capabilities=QuantizerCapabilities(**caps))


class TestInt8RowsPassesTheContract(QuantizerContract):
    @pytest.fixture
    def spec(self):
        return quantizer_spec(Int8Rows, checkpoint_methods=frozenset({"int8-rows"}),
                              dtypes=frozenset({"float32"}))

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
