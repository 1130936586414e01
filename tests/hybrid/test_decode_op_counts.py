"""A hybrid decode step launches the same ops whatever the batch size (CPU, torch.profiler).

Inside a captured CUDA graph every op is a kernel launch: a per-request Python loop in the decode
path (a state gather, conv update or checkpoint write per request) would become hundreds of tiny
kernels per layer at batch 64. The counts below are of ``model.forward`` only (the batch builder
and the attention metadata run on the host, outside the graph), for the eager step and for the
view a graph capture has (``prefix_lens_cpu`` all zero: the static batch's host lists).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from hybrid_harness import InterpretedInPool, StepHarness, interpreted_kernel, load_hinge

from hinge.testing.triton_interpreter import patch_interpreter


def decode_ops(model, batch_size: int, *, capture_view: bool = False) -> Counter:
    """aten ops of one decode step of ``batch_size`` requests (after a prefill and a decode)."""
    h = StepHarness(model, max_requests=batch_size, num_pages=4 * batch_size + 8)
    h.step([(f"r{i}", [3, 4, 5]) for i in range(batch_size)])
    h.step([(f"r{i}", [6]) for i in range(batch_size)])
    forward, counts = model.forward, Counter()

    def profiled(ctx):
        if capture_view:
            ctx = dataclasses.replace(ctx, batch=dataclasses.replace(
                ctx.batch, prefix_lens_cpu=[0] * len(ctx.batch.prefix_lens_cpu)))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = forward(ctx)
        counts.update(e.name for e in prof.events() if e.name.startswith("aten::"))
        return out

    model.forward = profiled
    try:
        h.step([(f"r{i}", [7]) for i in range(batch_size)])
    finally:
        model.forward = forward
    return counts


def growth(small: Counter, large: Counter) -> dict[str, tuple[int, int]]:
    return {op: (small[op], large[op]) for op in sorted(set(small) | set(large)) if small[op] != large[op]}


@pytest.mark.parametrize("capture_view", [False, True], ids=["eager", "graph capture view"])
@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Qwen3NextForCausalLM", "Lfm2ForCausalLM"])
def test_a_decode_step_runs_as_many_ops_at_batch_16_as_at_batch_2(hybrid_checkpoints, arch, capture_view):
    model = load_hinge(hybrid_checkpoints(arch))
    small, large = (decode_ops(model, b, capture_view=capture_view) for b in (2, 16))
    assert sum(small.values()) > 100, "the profiler saw the step"
    assert growth(small, large) == {}, "ops that grow with the batch (a per-request loop?)"


def test_a_decode_step_in_the_pool_copies_no_matrix_state_and_does_not_grow(hybrid_checkpoints,
                                                                            monkeypatch):
    patch_interpreter(monkeypatch)
    module = interpreted_kernel("decode_in_pool")
    model = load_hinge(hybrid_checkpoints("Qwen3_5ForCausalLM"))
    gather = decode_ops(model, 4, capture_view=True)
    model.set_recurrent_kernels(InterpretedInPool(rule=module))
    small, large = (decode_ops(model, b, capture_view=True) for b in (2, 16))
    assert growth(small, large) == {}
    deltanets = len(model.recurrent_layers)
    # per DeltaNet layer: no gather (index_select), no zero-fill (masked_fill), no scatter of the
    # matrix states (index_copy_); the conv windows and the stamps still take them
    for op in ("aten::index_select", "aten::masked_fill", "aten::index_copy_"):
        assert gather[op] - small[op] == deltanets, (op, gather[op], small[op])


def test_the_in_pool_decode_can_be_turned_off_from_the_environment(monkeypatch):
    from types import SimpleNamespace

    from hinge.layers.recurrent_kernels.checkpoints import decodes_in_pool

    batch = SimpleNamespace(track_states=False, checkpoint_lens_cpu=[0, 0], extend_lens_cpu=[1, 1])
    assert decodes_in_pool(batch)
    monkeypatch.setenv("HINGE_DECODE_IN_POOL", "0")
    assert not decodes_in_pool(batch)
