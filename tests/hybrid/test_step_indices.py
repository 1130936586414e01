"""Recurrent kernels build their index tensors once per step, not once per layer: the layout of
a mixed step (conv windows, padded chunk buckets, single-token rows) is computed on the host and
copied to the device one time, and every recurrent layer of the step reuses it."""

from __future__ import annotations

from hybrid_harness import StepHarness, load_hinge

from hinge.layers.recurrent_kernels import torch_ref


def test_a_mixed_step_computes_each_index_layout_once_for_all_recurrent_layers(hybrid_checkpoints):
    harness = StepHarness(load_hinge(hybrid_checkpoints("Qwen3_5ForCausalLM")))
    num_recurrent = len(harness.model.recurrent_layers)
    assert num_recurrent >= 2, "needs several recurrent layers to mean anything"
    harness.step([("a", list(range(3, 12)))])
    layouts = (torch_ref._conv_layout, torch_ref._bucket_layout, torch_ref._single_layout)
    for f in layouts:  # other tests may have left this very layout in the cache
        f.cache_clear()
    before = [f.cache_info() for f in layouts]
    # one decode row, two prefills of different lengths: every layout kind is used
    harness.step([("a", [7]), ("b", list(range(5, 18))), ("c", list(range(4, 9)))])
    after = [f.cache_info() for f in layouts]
    for f, b, a in zip(layouts, before, after, strict=True):
        calls = (a.hits + a.misses) - (b.hits + b.misses)
        assert calls == num_recurrent, f"{f.__name__} called {calls} times"
        assert a.misses - b.misses == 1, f"{f.__name__} rebuilt per layer"
