"""The kit's ``make_tiny_checkpoint`` hybrid entries load in hinge and match transformers."""

from __future__ import annotations

import pytest
from hybrid_harness import StepHarness, hf_model, load_hinge
from hybrid_oracle import assert_logits_close, hf_logits

from hinge.testing.checkpoints import make_tiny_checkpoint


@pytest.mark.parametrize("arch, num_recurrent", [("qwen3_5", 2), ("qwen3_next", 2), ("lfm2", 3)])
def test_kit_hybrid_checkpoints_load_and_match_transformers(tmp_path, arch, num_recurrent):
    path = make_tiny_checkpoint(arch, tmp_path)
    ours = load_hinge(path)
    assert len(ours.recurrent_layers) == num_recurrent
    ids = list(range(5, 30))
    out = StepHarness(ours).step([("r", ids)], all_logits=True).logits
    assert_logits_close(out, hf_logits(hf_model(path), ids))
