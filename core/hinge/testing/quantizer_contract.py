"""QuantizerContract: create weights from a layer spec, load a synthetic checkpoint through the
parameters' weight loaders (fused partitions, tensor-parallel ranks, stacked experts),
post-process, apply; results match float64 references of the dequantized weights. Claims are
exercised: the checkpoint methods it says it claims, every dtype, batch invariance, graphs (on
a GPU). The expert-set checks are in ``hinge.testing.moe_contract``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hinge.testing.base import (
    TOLERANCE,
    ContractBase,
    skip_unless_cuda_claimed,
    skip_unless_graph_claimed,
)
from hinge.testing.moe_contract import MoEContractChecks
from hinge.testing.quantized_layers import build_linear, load_linear
from hinge.testing.reference import reference_linear

NOT_A_METHOD = "hinge-contract-no-such-method"


class QuantizerContract(MoEContractChecks, ContractBase):
    """Subclass with a ``spec`` fixture. A quantized format overrides ``checkpoint_tensors``."""

    in_features = 128
    out_features = 64
    partition_sizes = (64, 32, 32)  #: a fused layer, shaped like q | k | v

    def checkpoint_tensors(self, weight: torch.Tensor, bias: torch.Tensor | None,
                           dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Checkpoint tensors of one linear for a float ``weight`` (out, in), and the weight they
        dequantize to. Also used per partition of a fused layer and per expert projection.

        Default: unquantized (``weight`` and ``bias`` in ``dtype``). A quantizer whose
        checkpoints hold packed data returns those tensors and their exact dequantization.
        """
        tensors = {"weight": weight.to(dtype)}
        if bias is not None:
            tensors["bias"] = bias.to(dtype)
        return tensors, weight.to(dtype)

    def tolerance(self, dtype: torch.dtype) -> float:
        return TOLERANCE[dtype] * 10  # sums of in_features products

    # -- helpers ----------------------------------------------------------------------------

    def loaded_linear(self, quantizer: Any, dtype: torch.dtype, device: str, sizes: tuple[int, ...],
                      bias: bool, seed: int, **parallel: Any):
        """A loaded layer and its float references: (layer, weight (sum(sizes), in), bias or None)."""
        gen = torch.Generator().manual_seed(seed)
        shards, refs, biases = [], [], []
        for size in sizes:
            w = torch.randn(size, self.in_features, generator=gen) / self.in_features ** 0.5
            b = torch.randn(size, generator=gen) if bias else None
            tensors, w_ref = self.checkpoint_tensors(w, b, dtype)
            shards.append(tensors)
            refs.append(w_ref)
            biases.append(b.to(dtype) if b is not None else None)
        layer = build_linear(quantizer, self.in_features, sizes, bias, dtype, device, **parallel)
        load_linear(layer, shards)
        return layer, torch.cat(refs), torch.cat(biases) if bias else None

    def _inputs(self, shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed + 1000)
        return torch.randn(*shape, self.in_features, generator=gen).to(dtype).to(device)

    def _assert_close(self, got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> None:
        assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        err = float((got.double().cpu() - expected).abs().max())
        assert err <= self.tolerance(dtype), f"{what} differs from the reference linear by {err:.3g}"

    def _check_apply(self, quantizer, dtype, device, bias=True, shape=(7,), seed=0, sizes=None):
        sizes = sizes or (self.out_features,)
        layer, w_ref, b_ref = self.loaded_linear(quantizer, dtype, device, sizes, bias, seed)
        x = self._inputs(shape, dtype, device, seed)
        y = quantizer.apply(layer, x)
        self._assert_close(y, reference_linear(x, w_ref, b_ref), dtype, "apply")

    # -- linear layers ----------------------------------------------------------------------

    def test_creates_a_bias_only_when_asked(self, component, dtype, device):
        with_bias = build_linear(component, self.in_features, (self.out_features,), True, dtype, device)
        without = build_linear(component, self.in_features, (self.out_features,), False, dtype, device)
        assert getattr(with_bias, "bias", None) is not None
        assert tuple(with_bias.bias.shape) == (self.out_features,)
        assert getattr(without, "bias", None) is None

    def test_apply_matches_reference_linear(self, component, dtype, device):
        self._check_apply(component, dtype, device, bias=True, shape=(7,))
        self._check_apply(component, dtype, device, bias=True, shape=(2, 5))

    def test_apply_without_bias_matches_reference_linear(self, component, dtype, device):
        self._check_apply(component, dtype, device, bias=False, shape=(3,))

    def test_fused_layer_loads_every_partition_and_matches_reference(self, component, dtype, device):
        """Partitions loaded one checkpoint tensor at a time (shard_id 0, 1, 2) act as one GEMM."""
        self._check_apply(component, dtype, device, bias=True, shape=(9,), sizes=self.partition_sizes, seed=4)

    def test_column_parallel_rank_holds_its_rows_of_every_partition(self, build_component, dtype, device):
        full_layer, w_ref, b_ref = self.loaded_linear(build_component(), dtype, device, self.partition_sizes,
                                                      True, seed=5)
        x = self._inputs((6,), dtype, device, 5)
        expected = reference_linear(x, w_ref, b_ref)
        offsets = [sum(self.partition_sizes[:i]) for i in range(len(self.partition_sizes))]
        for rank in range(2):
            layer, _, _ = self.loaded_linear(build_component(rank=rank, world_size=2), dtype, device,
                                             self.partition_sizes, True, seed=5, parallel="column",
                                             rank=rank, world_size=2)
            rows = [o + rank * s // 2 + j for o, s in zip(offsets, self.partition_sizes, strict=True)
                    for j in range(s // 2)]
            y = layer.quantizer.apply(layer, x)
            self._assert_close(y, expected[:, rows], dtype, f"column-parallel rank {rank} of 2")

    def test_row_parallel_partial_outputs_sum_to_the_full_layer(self, build_component, dtype, device):
        """Each rank multiplies its half of the input columns; the bias is added by rank 0 only."""
        half = self.in_features // 2
        x = self._inputs((6,), dtype, device, 6)
        total, expected = None, None
        for rank in range(2):
            layer, w_ref, b_ref = self.loaded_linear(
                build_component(rank=rank, world_size=2), dtype, device, (self.out_features,), True, seed=6,
                parallel="row", rank=rank, world_size=2)
            part = layer.quantizer.apply(layer, x[:, rank * half:(rank + 1) * half]).double().cpu()
            total = part if total is None else total + part
            expected = reference_linear(x, w_ref, b_ref)
        self._assert_close(total, expected, dtype, "sum of row-parallel ranks")

    def test_a_gated_answer_is_the_activation_of_apply_rounded_once(self, component, dtype, device):
        """Where ``apply_gated`` answers for a [gate | up] layer, it is ``silu(gate) * up`` of
        ``apply``'s own output (float64 here), within one rounding to the layer's dtype (and
        float32's arithmetic)."""
        self._check_gated(component, dtype, device)

    def _check_gated(self, quantizer, dtype, device):
        half = self.out_features
        layer, _, _ = self.loaded_linear(quantizer, dtype, device, (half, half), False, seed=8)
        answered = 0
        for rows in (1, 3, 8, 21):
            x = self._inputs((rows,), dtype, device, 8 + rows)
            got = quantizer.apply_gated(layer, x, "silu")
            if got is None:
                continue
            answered += 1
            y = quantizer.apply(layer, x).double().cpu()
            gate, up = y[..., :half], y[..., half:]
            want = gate / (1 + torch.exp(-gate)) * up
            assert got.shape == want.shape and got.dtype == dtype, (
                f"apply_gated gave {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {dtype}")
            err = (got.double().cpu() - want).abs()
            # one rounding to dtype, and float32's own exp, add, divide and multiply
            bound = (torch.finfo(dtype).eps + 8 * torch.finfo(torch.float32).eps) * want.abs() + torch.finfo(dtype).tiny
            worst = int(torch.argmax(err - bound))
            assert bool((err <= bound).all()), (
                f"apply_gated differs from silu(gate) * up of apply's output by {float(err.flatten()[worst]):.3g} "
                f"at {worst} (value {float(want.flatten()[worst]):.4g}; one rounding allows "
                f"{float(bound.flatten()[worst]):.3g}), {rows} rows")
        if not answered:
            pytest.skip("apply_gated declines every call here (None: the MLP runs apply and the activation)")

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
        layer, _, _ = self.loaded_linear(q, dtype, device, self.partition_sizes, False, seed=3)
        x = self._inputs((37,), dtype, device, 3)
        full = q.apply(layer, x)
        for rows in (slice(0, 1), slice(5, 6), slice(3, 20), slice(36, 37)):
            assert torch.equal(q.apply(layer, x[rows]), full[rows]), f"rows {rows} changed with batch size"

    @pytest.mark.gpu
    def test_claimed_cuda_device_matches_reference(self, spec, build_component):
        skip_unless_cuda_claimed(spec)
        for name in sorted(spec.capabilities.dtypes):
            dtype = getattr(torch, name)
            self._check_apply(build_component(device="cuda", dtype=dtype), dtype, "cuda",
                              sizes=self.partition_sizes)

    @pytest.mark.gpu
    def test_decode_graph_replay_equals_eager(self, spec, build_component, dtype):
        skip_unless_graph_claimed(spec, "decode")
        q = build_component(device="cuda")
        layer, _, _ = self.loaded_linear(q, dtype, "cuda", self.partition_sizes, False, seed=7)
        x = self._inputs((8,), dtype, "cuda", 7)
        q.apply(layer, x)  # warm up
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = q.apply(layer, x)
        new = torch.randn_like(x)
        x.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, q.apply(layer, new), atol=self.tolerance(dtype))
