"""AttentionBackendContract: a backend matches the float64 oracle on every batch shape, and
every capability it claims (page sizes, dtypes, sliding window, logit softcap, batch
invariance, graphs, KV written by the layer) is exercised; its availability check answers None or a reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from hinge.contracts import AttentionLayer
from hinge.testing.base import (
    TOLERANCE,
    ContractBase,
    skip_unless_cuda_claimed,
    skip_unless_graph_claimed,
)
from hinge.testing.batches import BatchCase, build_batch, page_tail_fill
from hinge.testing.reference import reference_attention


def make_layer(head_dim: int, num_heads: int = 4, num_kv_heads: int = 2,
               sliding_window: int | None = None, logit_softcap: float | None = None
               ) -> AttentionLayer:
    return AttentionLayer(kv_layer_id=1, num_heads=num_heads, num_kv_heads=num_kv_heads,
                          head_dim=head_dim, scale=head_dim ** -0.5, sliding_window=sliding_window,
                          logit_softcap=logit_softcap)


def run_backend(backend: Any, case: BatchCase) -> torch.Tensor:
    case.batch.attn_metadata = backend.prepare_metadata(case.batch)
    return backend.forward(case.q, case.k, case.v, case.layer, case.kv, case.batch)


def check_against_reference(backend: Any, case: BatchCase, atol: float) -> None:
    """Output close to the oracle and the new k/v written at ``out_loc``; nothing else touched."""
    k_before = case.kv.k[case.layer.kv_layer_id].clone()
    v_before = case.kv.v[case.layer.kv_layer_id].clone()
    expected = reference_attention(case.q, case.kv, case.layer, case.batch, k=case.k, v=case.v)
    out = run_backend(backend, case)
    assert out.shape == case.q.shape, f"output shape {tuple(out.shape)} != q shape {tuple(case.q.shape)}"
    assert out.dtype == case.q.dtype, f"output dtype {out.dtype} != q dtype {case.q.dtype}"
    err = (out.double().cpu() - expected).abs()
    for i in range(case.batch.batch_size):
        rows = case.rows_of(i)
        worst = float(err[rows].max()) if rows.stop > rows.start else 0.0
        assert worst <= atol, (
            f"request {i} (prefix {case.batch.prefix_lens_cpu[i]}, extend "
            f"{case.batch.extend_lens_cpu[i]}, phase {case.batch.phase}, page_size "
            f"{case.kv.page_size}): max |out - reference| = {worst:.3g} > {atol:.3g}")
    k_after, v_after = case.kv.k[case.layer.kv_layer_id], case.kv.v[case.layer.kv_layer_id]
    loc = case.batch.out_loc
    assert torch.equal(k_after[loc], case.k.to(k_after.dtype)), "new keys not written at batch.out_loc"
    assert torch.equal(v_after[loc], case.v.to(v_after.dtype)), "new values not written at batch.out_loc"
    untouched = torch.ones(k_after.shape[0], dtype=torch.bool, device=k_after.device)
    untouched[loc] = False
    for after, before in ((k_after, k_before), (v_after, v_before)):
        assert torch.equal(after[untouched].nan_to_num(nan=7.0), before[untouched].nan_to_num(nan=7.0)), (
            "the backend wrote KV slots outside batch.out_loc")


class AttentionBackendContract(ContractBase):
    """Subclass with a ``spec`` fixture returning your AttentionBackendSpec."""

    @pytest.fixture
    def page_size(self, spec) -> int:
        sizes = spec.capabilities.page_sizes
        return 16 if sizes is None or 16 in sizes else min(sizes)

    @pytest.fixture
    def head_dim(self, spec) -> int:
        dims = spec.capabilities.head_dims
        return 16 if dims is None else min(dims)

    @pytest.fixture
    def check(self, spec, component, head_dim, page_size, dtype, device):
        """``check(prefix_lens, extend_lens, **layer_or_batch_overrides)`` against the oracle."""

        def run(prefix_lens: Sequence[int], extend_lens: Sequence[int], *, backend: Any = None,
                num_heads: int = 4, num_kv_heads: int = 2, sliding_window: int | None = None,
                logit_softcap: float | None = None, **kwargs: Any) -> None:
            kwargs.setdefault("page_size", page_size)
            kwargs.setdefault("dtype", dtype)
            kwargs.setdefault("page_tail_fill", page_tail_fill(spec.capabilities))
            layer = make_layer(head_dim, num_heads, num_kv_heads, sliding_window, logit_softcap)
            case = build_batch(prefix_lens, extend_lens, layer=layer, device=device, **kwargs)
            check_against_reference(backend or component, case, TOLERANCE[kwargs["dtype"]])

        return run

    def _needs_phase(self, spec, phase: str) -> None:
        if phase not in spec.capabilities.phases:
            pytest.skip(f"{spec.name!r} does not claim {phase} batches")

    def test_prefill_matches_reference(self, spec, check):
        self._needs_phase(spec, "prefill")
        check([0, 0, 0], [5, 17, 33])

    def test_prefill_after_a_cached_prefix_matches_reference(self, spec, check):
        self._needs_phase(spec, "prefill")
        check([16, 7, 32], [9, 20, 3], phase="prefill")

    def test_decode_matches_reference(self, spec, check):
        self._needs_phase(spec, "decode")
        check([1, 15, 16, 40], [1, 1, 1, 1])

    def test_mixed_batch_matches_reference(self, spec, check):
        self._needs_phase(spec, "mixed")
        check([10, 0, 33, 5], [1, 12, 1, 7])

    def test_verify_batch_matches_reference(self, spec, check):
        self._needs_phase(spec, "verify")
        check([5, 20, 31], [4, 4, 4], phase="verify")

    @pytest.mark.parametrize("num_kv_heads", [1, 4], ids=["mqa", "mha"])
    def test_grouped_query_layouts_match_reference(self, check, num_kv_heads):
        check([3, 0], [1, 9], num_kv_heads=num_kv_heads)

    @pytest.fixture(autouse=True)
    def _keep_builder(self, build_component):
        self._build_component = build_component

    def test_every_claimed_page_size(self, spec, check):
        """Any page size claimed (or 1, 16 and 64 when the claim is "any") gives the same results."""
        sizes = spec.capabilities.page_sizes
        for size in sorted(sizes) if sizes is not None else (1, 16, 64):
            check([0, 2 * size + 1, size], [size + 3, 1, 2], page_size=size,
                  backend=self._build_component(page_size=size))

    def test_every_claimed_dtype(self, spec, check, device):
        for name in sorted(spec.capabilities.dtypes):
            dtype = getattr(torch, name)
            check([0, 9], [12, 1], dtype=dtype, backend=self._build_component(dtype=dtype))

    def test_sliding_window_matches_reference(self, spec, check):
        if not spec.capabilities.sliding_window:
            pytest.skip(f"{spec.name!r} does not claim sliding_window")
        check([0, 30, 40], [37, 1, 6], sliding_window=8)

    def test_logit_softcap_matches_reference(self, spec, check):
        """A cap of 1.5 on scores of spread ~1 changes every output (an ignored cap fails)."""
        if not spec.capabilities.logit_softcap:
            pytest.skip(f"{spec.name!r} does not claim logit_softcap")
        check([0, 30, 40], [37, 1, 6], logit_softcap=1.5)
        if spec.capabilities.sliding_window:
            check([0, 30, 40], [37, 1, 6], logit_softcap=1.5, sliding_window=8)

    def test_kv_written_by_the_layer_is_attended_and_not_written_again(self, spec, component, head_dim,
                                                                        page_size, dtype, device):
        """The claim ``kv_written_by_layer``: with the step's keys and values already at
        ``out_loc`` and ``kv_saved=True``, the output is the oracle's although ``k`` and ``v``
        are NaN (they are read from the pool), and the pool keeps the layer's values."""
        if not spec.capabilities.kv_written_by_layer:
            pytest.skip(f"{spec.name!r} does not claim kv_written_by_layer")
        layer = make_layer(head_dim)
        for prefix_lens, extend_lens in (([0, 16, 7], [5, 9, 20]), ([1, 15, 40], [1, 1, 1]),
                                         ([10, 0, 33], [1, 12, 1]), ([300], [1])):  # batch-1 decode
            case = build_batch(prefix_lens, extend_lens, layer=layer, device=device, page_size=page_size,
                               dtype=dtype, page_tail_fill=page_tail_fill(spec.capabilities))
            expected = reference_attention(case.q, case.kv, case.layer, case.batch, k=case.k, v=case.v)
            k_cache, v_cache = case.kv.k[layer.kv_layer_id], case.kv.v[layer.kv_layer_id]
            loc = case.batch.out_loc
            k_cache[loc], v_cache[loc] = case.k.to(k_cache.dtype), case.v.to(v_cache.dtype)  # the layer's write
            case.batch.attn_metadata = component.prepare_metadata(case.batch)
            nan = torch.full_like(case.k, float("nan"))
            out = component.forward(case.q, nan, nan.clone(), layer, case.kv, case.batch, kv_saved=True)
            worst = float((out.double().cpu() - expected).abs().max())
            assert worst <= TOLERANCE[dtype], (
                f"kv_saved=True (prefix {prefix_lens}, extend {extend_lens}): max |out - reference| = "
                f"{worst:.3g}: the backend attended over the k/v it was passed, not the pool's")
            assert torch.equal(k_cache[loc], case.k.to(k_cache.dtype)) and torch.equal(
                v_cache[loc], case.v.to(v_cache.dtype)), "kv_saved=True, yet the backend wrote k/v into the pool"

    def test_availability_check_answers_none_or_a_reason(self, spec):
        """``spec.availability`` (when given) returns None or a non-empty reason on a machine
        without CUDA, an H200 and a GPU generation past its kernels, and never raises."""
        from hinge.plugins.availability import Machine, check_reason

        if spec.availability is None:
            pytest.skip(f"{spec.name!r} declares no availability check")
        check = spec.load_availability()
        for machine in (Machine("cpu", False), Machine("cuda", True, (9, 0)),
                        Machine("cuda", True, (12, 0))):
            reason = check(machine)
            assert reason is None or (isinstance(reason, str) and reason.strip()), (
                f"availability({machine}) returned {reason!r}; return None or a reason")
            assert check_reason(spec, machine) == reason

    def test_batch_invariant_claim_holds_across_batches_and_chunks(self, spec, head_dim, page_size,
                                                                    dtype, device):
        """One request's output bits are the same alone, in a batch, and after a chunk split."""
        if not spec.capabilities.batch_invariant:
            pytest.skip(f"{spec.name!r} does not claim batch_invariant")
        backend = self._build_component(deterministic=True)
        layer = make_layer(head_dim)

        def rows(prefix, extend, index, seeds):
            case = build_batch(prefix, extend, layer=layer, page_size=page_size, dtype=dtype,
                               device=device, seeds=seeds,
                               page_tail_fill=page_tail_fill(spec.capabilities))
            return run_backend(backend, case)[case.rows_of(index)].cpu()

        alone = rows([0], [70], 0, [42])
        batched = rows([5, 0, 12], [3, 70, 1], 1, [1, 42, 2])
        assert torch.equal(alone, batched), "a request's output changed when batched with others"
        chunked = rows([40], [30], 0, [42])
        assert torch.equal(alone[40:], chunked), "output changed when the prompt was split at token 40"
        decode = rows([69, 3], [1, 4], 0, [42, 5])
        assert torch.equal(alone[69:], decode), "a decode step differs from the same row in prefill"

    @pytest.mark.gpu
    def test_claimed_cuda_device_matches_reference(self, spec, head_dim, page_size, dtype):
        skip_unless_cuda_claimed(spec)
        for name in sorted(spec.capabilities.dtypes):
            dt = getattr(torch, name)
            case = build_batch([10, 0, 33, 5], [1, 12, 1, 7], layer=make_layer(head_dim),
                               page_size=page_size, dtype=dt, device="cuda",
                               page_tail_fill=page_tail_fill(spec.capabilities))
            check_against_reference(self._build_component(device="cuda", dtype=dt), case, TOLERANCE[dt])

    @pytest.mark.gpu
    def test_decode_graph_replay_equals_eager(self, spec, head_dim, page_size, dtype):
        """Captured at 4 requests, replayed with 4, 3, 1 and 2 live: padded rows cleared."""
        self._graph_test(spec, "decode", head_dim, page_size, dtype)

    @pytest.mark.gpu
    def test_prefill_graph_replay_equals_eager(self, spec, head_dim, page_size, dtype):
        """Varlen prefill and mixed steps replayed in a 32-token shape: padded rows cleared."""
        self._graph_test(spec, "prefill", head_dim, page_size, dtype)

    @pytest.mark.parametrize("phase", ["decode", "prefill"])
    def test_graph_protocol_pads_and_clears_on_cpu(self, spec, head_dim, page_size, dtype, phase):
        """The same protocol check without a GPU, for a backend that claims the graph and runs on
        CPU: "replay" reruns the captured call over the same static tensors."""
        if not spec.capabilities.supports_graph(phase):
            pytest.skip(f"{spec.name!r} does not claim {phase}_graph")
        if "cpu" not in spec.capabilities.devices:
            pytest.skip(f"{spec.name!r} does not run on cpu; its graph claims are checked on a GPU")
        from hinge.testing.graphs import check_graph_replay

        check_graph_replay(self._build_component(device="cpu"), phase, make_layer(head_dim),
                           page_size, dtype, device="cpu",
                           page_tail_fill=page_tail_fill(spec.capabilities))

    def _graph_test(self, spec, phase, head_dim, page_size, dtype):
        skip_unless_graph_claimed(spec, phase)
        from hinge.testing.graphs import check_graph_replay

        check_graph_replay(self._build_component(device="cuda"), phase, make_layer(head_dim),
                           page_size, dtype, device="cuda",
                           page_tail_fill=page_tail_fill(spec.capabilities))
