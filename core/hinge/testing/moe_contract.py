"""The expert-set half of ``QuantizerContract``: ``create_moe_weights`` / ``apply_moe`` against the
float64 per-expert reference (``hinge.testing.reference.reference_moe``), loaded per expert and
projection through the weight loaders, split over tensor-parallel ranks, batch invariant when
claimed, on CUDA and in a captured graph when claimed. A quantizer that keeps the contract's
default (unquantized experts) passes these with the default ``checkpoint_tensors``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hinge.testing.base import skip_unless_cuda_claimed, skip_unless_graph_claimed
from hinge.testing.quantized_layers import build_moe, load_moe, random_routing
from hinge.testing.reference import reference_moe


class MoEContractChecks:
    """Mixed into ``QuantizerContract`` (which provides ``checkpoint_tensors`` and ``tolerance``)."""

    num_experts = 4
    moe_hidden_size = 128
    moe_intermediate_size = 64
    moe_top_k = 2

    def moe_checkpoint_tensors(self, quantizer: Any, weight: torch.Tensor,
                               dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One expert projection's checkpoint tensors and the weight they dequantize to: plain
        when the quantizer keeps the contract's default (unquantized) experts, else
        ``checkpoint_tensors``. Override when experts are stored differently from linears."""
        from hinge.contracts import Quantizer

        if type(quantizer).create_moe_weights is Quantizer.create_moe_weights:
            return {"weight": weight.to(dtype)}, weight.to(dtype)
        return self.checkpoint_tensors(weight, None, dtype)

    def loaded_experts(self, quantizer: Any, dtype: torch.dtype, device: str, seed: int, **parallel: Any):
        """A loaded expert set and its float references ``[(gate, up, down)] * E``."""
        gen = torch.Generator().manual_seed(seed)
        h, i = self.moe_hidden_size, self.moe_intermediate_size
        tensors, refs = [], []
        for _ in range(self.num_experts):
            weights = {"w1": torch.randn(i, h, generator=gen) / h ** 0.5,
                       "w3": torch.randn(i, h, generator=gen) / h ** 0.5,
                       "w2": torch.randn(h, i, generator=gen) / i ** 0.5}
            expert, ref = {}, {}
            for shard, w in weights.items():
                expert[shard], ref[shard] = self.moe_checkpoint_tensors(quantizer, w, dtype)
            tensors.append(expert)
            refs.append((ref["w1"], ref["w3"], ref["w2"]))
        layer = build_moe(quantizer, self.num_experts, h, i, self.moe_top_k, dtype, device, **parallel)
        return load_moe(layer, tensors), refs

    def moe_inputs(self, num_tokens: int, dtype: torch.dtype, device: str, seed: int):
        """x (T, H), topk_ids (T, k) ascending per row, topk_weights (T, k)."""
        gen = torch.Generator().manual_seed(seed + 2000)
        x = torch.randn(num_tokens, self.moe_hidden_size, generator=gen).to(dtype)
        ids, weights = random_routing(num_tokens, self.num_experts, self.moe_top_k, dtype, gen)
        return x.to(device), ids.to(device), weights.to(device)

    def _assert_moe_close(self, got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str):
        assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        err = float((got.double().cpu() - expected).abs().max())
        bound = self.tolerance(dtype) * 4 * max(1.0, float(expected.abs().max()))
        assert err <= bound, f"{what} differs from the per-expert reference by {err:.3g} (bound {bound:.3g})"

    def _check_moe(self, quantizer, dtype, device, num_tokens=11, seed=0):
        layer, refs = self.loaded_experts(quantizer, dtype, device, seed)
        x, ids, weights = self.moe_inputs(num_tokens, dtype, device, seed)
        out = quantizer.apply_moe(layer, x, ids, weights)
        self._assert_moe_close(out, reference_moe(x, refs, ids, weights), dtype, "apply_moe")

    def test_experts_match_per_expert_reference(self, component, dtype, device):
        self._check_moe(component, dtype, device, num_tokens=11)
        self._check_moe(component, dtype, device, num_tokens=1, seed=1)

    def test_experts_of_every_claimed_dtype(self, spec, build_component, device):
        for name in sorted(spec.capabilities.dtypes):
            dtype = getattr(torch, name)
            self._check_moe(build_component(dtype=dtype), dtype, device, num_tokens=5, seed=2)

    def test_tensor_parallel_experts_sum_to_the_full_set(self, build_component, dtype, device):
        """Each rank holds half of every expert's intermediate size; partial outputs add up."""
        x, ids, weights = self.moe_inputs(7, dtype, device, 3)
        total, refs = None, None
        for rank in range(2):
            q = build_component(rank=rank, world_size=2)
            layer, refs = self.loaded_experts(q, dtype, device, 3, rank=rank, world_size=2)
            part = q.apply_moe(layer, x, ids, weights).double().cpu()
            total = part if total is None else total + part
        self._assert_moe_close(total, reference_moe(x, refs, ids, weights), dtype, "sum of expert ranks")

    def test_experts_batch_invariant_claim_holds(self, spec, build_component, dtype, device):
        """A token's output bits do not depend on the other tokens routed with it."""
        if not spec.capabilities.batch_invariant:
            pytest.skip(f"{spec.name!r} does not claim batch_invariant")
        q = build_component(deterministic=True)
        layer, _ = self.loaded_experts(q, dtype, device, 4)
        x, ids, weights = self.moe_inputs(37, dtype, device, 4)
        full = q.apply_moe(layer, x, ids, weights)
        for rows in (slice(0, 1), slice(5, 6), slice(3, 20), slice(36, 37)):
            alone = q.apply_moe(layer, x[rows], ids[rows], weights[rows])
            assert torch.equal(alone, full[rows]), f"expert rows {rows} changed with batch size"

    @pytest.mark.gpu
    def test_claimed_cuda_experts_match_reference(self, spec, build_component):
        skip_unless_cuda_claimed(spec)
        for name in sorted(spec.capabilities.dtypes):
            dtype = getattr(torch, name)
            self._check_moe(build_component(device="cuda", dtype=dtype), dtype, "cuda", num_tokens=40, seed=5)

    @pytest.mark.gpu
    def test_experts_decode_graph_replay_equals_eager(self, spec, build_component, dtype):
        """``apply_moe`` is captured in a CUDA graph (no host sync) and replays new routings."""
        skip_unless_graph_claimed(spec, "decode")
        q = build_component(device="cuda")
        layer, _ = self.loaded_experts(q, dtype, "cuda", 6)
        x, ids, weights = self.moe_inputs(8, dtype, "cuda", 6)
        q.apply_moe(layer, x, ids, weights)  # warm up (compiles kernels)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = q.apply_moe(layer, x, ids, weights)
        new_x, new_ids, new_weights = self.moe_inputs(8, dtype, "cuda", 7)
        x.copy_(new_x)
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, q.apply_moe(layer, new_x, new_ids, new_weights), atol=self.tolerance(dtype))
