"""Qwen3.5's gated attention with the q/k norm + rope kernel writing the step's KV
(the default; ``HINGE_ROPE_KV_WRITE=0`` turns it off; interpreted on CPU): the logits of a
chunked prefill and decode keep the bits of the separate KV write, and the separate write is
not called."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from hybrid_harness import StepHarness, load_hinge
from hybrid_oracle import PROMPTS

import hinge
from hinge.testing.triton_interpreter import load_interpreted, patch_interpreter


def run(harness: StepHarness) -> torch.Tensor:
    seq = PROMPTS[0] + PROMPTS[2]
    logits = [harness.step([("r", seq[0:9])], all_logits=True).logits]
    logits += [harness.step([("r", [t])]).logits for t in seq[9:13]]
    return torch.cat(logits)


def test_the_gated_attention_with_the_rope_kernel_writing_the_kv_keeps_its_logits(
        hybrid_checkpoints, monkeypatch):
    patch_interpreter(monkeypatch)
    kernel = load_interpreted(Path(hinge.__file__).parent / "layers/fast_triton/qk_norm_rope.py",
                              "_interpreted_hybrid_qk_norm_rope")
    calls = {"kv_target": 0, "plain": 0}
    drop = []  # set: the kernel is told to write the KV and does not (the check must then fail)

    def counted(*args, kv_target=None, **kwargs):
        calls["kv_target" if kv_target is not None else "plain"] += 1
        return kernel.qk_norm_rope(*args, kv_target=None if drop else kv_target, **kwargs)

    fused_kernels = SimpleNamespace(qk_norm_rope=SimpleNamespace(
        supports=kernel.supports, writes_kv=kernel.writes_kv, qk_norm_rope=counted))
    # the rope kernel alone (interpreted) in the attention layers; every other op as on CPU
    import hinge.models.dense as dense

    monkeypatch.setattr(dense, "fast_triton", SimpleNamespace(
        enabled=lambda x, deterministic=False, invariant=False: invariant, kernels=lambda: fused_kernels))
    model = load_hinge(hybrid_checkpoints("Qwen3_5ForCausalLM"))
    monkeypatch.setenv("HINGE_ROPE_KV_WRITE", "0")
    separate = run(StepHarness(model))
    assert calls == {"kv_target": 0, "plain": 10}  # 2 attention layers x 5 steps
    monkeypatch.delenv("HINGE_ROPE_KV_WRITE")  # the default: the rope kernel writes the KV
    writes = []
    import hinge.layers.kv_write as kv_write

    real = kv_write.write_kv
    monkeypatch.setattr(kv_write, "write_kv", lambda *a: writes.append(1) or real(*a))
    fused = run(StepHarness(model))
    assert calls["kv_target"] == 10 and not writes
    assert torch.equal(fused, separate)
    drop.append(True)
    assert not torch.equal(run(StepHarness(model)).nan_to_num(7.0), separate)  # the check can fail
