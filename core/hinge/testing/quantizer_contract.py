"""QuantizerContract: create weights, load a synthetic checkpoint by name, post-process, apply;
the result matches the float64 linear of the dequantized weights. Claims are exercised: the
checkpoint methods it says it claims, every dtype, batch invariance, graphs (on a GPU)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from hinge.testing.base import (
    TOLERANCE,
    ContractBase,
    skip_unless_cuda_claimed,
    skip_unless_graph_claimed,
)
from hinge.testing.reference import reference_linear

NOT_A_METHOD = "hinge-contract-no-such-method"


def make_linear(quantizer: Any, in_features: int, out_features: int, bias: bool,
                dtype: torch.dtype, tensors: dict[str, torch.Tensor], device: str) -> nn.Module:
    """What the model loader does: create, copy checkpoint tensors by name, post-process."""
    layer = nn.Module()
    quantizer.create_weights(layer, in_features, out_features, bias, dtype)
    layer.to(device)
    params = dict(layer.named_parameters()) | dict(layer.named_buffers())
    for name, tensor in tensors.items():
        assert name in params, f"checkpoint tensor {name!r} has no parameter; created: {sorted(params)}"
        assert params[name].shape == tensor.shape, (
            f"{name}: created {tuple(params[name].shape)}, checkpoint {tuple(tensor.shape)}")
        with torch.no_grad():
            params[name].copy_(tensor)
    quantizer.process_weights_after_loading(layer)
    return layer


class QuantizerContract(ContractBase):
    """Subclass with a ``spec`` fixture. A quantized format overrides ``checkpoint_tensors``."""

    in_features = 128
    out_features = 64

    def checkpoint_tensors(self, weight: torch.Tensor, bias: torch.Tensor | None,
                           dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Checkpoint tensors for a float ``weight`` (out, in) and the weight they dequantize to.

        Default: unquantized (``weight`` and ``bias`` in ``dtype``). A quantizer whose
        checkpoints hold packed data returns those tensors and their exact dequantization.
        """
        tensors = {"weight": weight.to(dtype)}
        if bias is not None:
            tensors["bias"] = bias.to(dtype)
        return tensors, weight.to(dtype)

    def tolerance(self, dtype: torch.dtype) -> float:
        return TOLERANCE[dtype] * 10  # sums of in_features products

    def _check_apply(self, quantizer, dtype, device, bias=True, shape=(7,), seed=0):
        gen = torch.Generator().manual_seed(seed)
        w = torch.randn(self.out_features, self.in_features, generator=gen) / self.in_features ** 0.5
        b = torch.randn(self.out_features, generator=gen) if bias else None
        tensors, w_ref = self.checkpoint_tensors(w, b, dtype)
        layer = make_linear(quantizer, self.in_features, self.out_features, bias, dtype,
                            {k: t.to(device) for k, t in tensors.items()}, device)
        x = torch.randn(*shape, self.in_features, generator=gen).to(dtype).to(device)
        y = quantizer.apply(layer, x)
        assert y.shape == (*shape, self.out_features), f"apply returned shape {tuple(y.shape)}"
        expected = reference_linear(x, w_ref, b.to(dtype) if b is not None else None)
        err = float((y.double().cpu() - expected).abs().max())
        assert err <= self.tolerance(dtype), f"apply differs from the reference linear by {err:.3g}"

    def test_creates_a_bias_only_when_asked(self, component, dtype):
        with_bias, without = nn.Module(), nn.Module()
        component.create_weights(with_bias, self.in_features, self.out_features, True, dtype)
        component.create_weights(without, self.in_features, self.out_features, False, dtype)
        assert getattr(with_bias, "bias", None) is not None
        assert getattr(without, "bias", None) is None

    def test_apply_matches_reference_linear(self, component, dtype, device):
        self._check_apply(component, dtype, device, bias=True, shape=(7,))
        self._check_apply(component, dtype, device, bias=True, shape=(2, 5))

    def test_apply_without_bias_matches_reference_linear(self, component, dtype, device):
        self._check_apply(component, dtype, device, bias=False, shape=(3,))

    def test_every_claimed_dtype(self, spec, build_component, device):
        for name in sorted(spec.capabilities.dtypes):
            dtype = getattr(torch, name)
            self._check_apply(build_component(dtype=dtype), dtype, device)

    def test_claims_exactly_what_it_declares(self, spec, component):
        caps = spec.capabilities
        for method in sorted(caps.checkpoint_methods):
            assert component.claims({"quant_method": method}), f"does not claim declared method {method!r}"
        assert not component.claims({"quant_method": NOT_A_METHOD}), "claims an unknown quant_method"
        assert bool(component.claims(None)) == caps.claims_unquantized, (
            f"claims(None) = {component.claims(None)} but claims_unquantized = {caps.claims_unquantized}")

    def test_batch_invariant_claim_holds(self, spec, build_component, dtype, device):
        """A row's output bits do not depend on how many rows share the call."""
        if not spec.capabilities.batch_invariant:
            pytest.skip(f"{spec.name!r} does not claim batch_invariant")
        q = build_component(deterministic=True)
        gen = torch.Generator().manual_seed(3)
        w = torch.randn(self.out_features, self.in_features, generator=gen)
        tensors, _ = self.checkpoint_tensors(w, None, dtype)
        layer = make_linear(q, self.in_features, self.out_features, False, dtype,
                            {k: t.to(device) for k, t in tensors.items()}, device)
        x = torch.randn(37, self.in_features, generator=gen).to(dtype).to(device)
        full = q.apply(layer, x)
        for rows in (slice(0, 1), slice(5, 6), slice(3, 20), slice(36, 37)):
            assert torch.equal(q.apply(layer, x[rows]), full[rows]), f"rows {rows} changed with batch size"

    @pytest.mark.gpu
    def test_claimed_cuda_device_matches_reference(self, spec, build_component):
        skip_unless_cuda_claimed(spec)
        for name in sorted(spec.capabilities.dtypes):
            dtype = getattr(torch, name)
            self._check_apply(build_component(device="cuda", dtype=dtype), dtype, "cuda")

    @pytest.mark.gpu
    def test_decode_graph_replay_equals_eager(self, spec, build_component, dtype):
        skip_unless_graph_claimed(spec, "decode")
        q = build_component(device="cuda")
        w = torch.randn(self.out_features, self.in_features)
        tensors, _ = self.checkpoint_tensors(w, None, dtype)
        layer = make_linear(q, self.in_features, self.out_features, False, dtype,
                            {k: t.cuda() for k, t in tensors.items()}, "cuda")
        x = torch.randn(8, self.in_features, device="cuda").to(dtype)
        q.apply(layer, x)  # warm up
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = q.apply(layer, x)
        new = torch.randn_like(x)
        x.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, q.apply(layer, new), atol=self.tolerance(dtype))
