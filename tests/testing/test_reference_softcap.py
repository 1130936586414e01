"""The kit's float64 oracle applies ``AttentionLayer.logit_softcap`` as Gemma 2 defines it:
scaled scores ``s`` become ``cap * tanh(s / cap)`` before the causal softmax."""

from __future__ import annotations

import math

import torch

from hinge.contracts import AttentionLayer
from hinge.testing.batches import build_batch
from hinge.testing.reference import reference_attention


def test_the_oracle_caps_scores_before_the_softmax_by_hand():
    """One request of two tokens, one head: the second query's output is a two-key softmax."""
    layer = AttentionLayer(kv_layer_id=0, num_heads=1, num_kv_heads=1, head_dim=4, scale=0.5,
                           logit_softcap=1.5)
    case = build_batch([0], [2], layer=layer, dtype=torch.float64)
    out = reference_attention(case.q, case.kv, layer, case.batch, k=case.k, v=case.v)
    q, k, v = case.q[1, 0], case.k[:, 0], case.v[:, 0]
    capped = [1.5 * math.tanh(float(q @ k[j]) * 0.5 / 1.5) for j in range(2)]
    weights = torch.tensor([math.exp(c) for c in capped], dtype=torch.float64)
    expected = (weights[:, None] * v).sum(0) / weights.sum()
    assert torch.allclose(out[1, 0], expected, atol=1e-12)
    assert torch.allclose(out[0, 0], v[0], atol=1e-12), "the first query sees only its own key"
    uncapped = reference_attention(case.q, case.kv, AttentionLayer(0, 1, 1, 4, 0.5), case.batch,
                                   k=case.k, v=case.v)
    assert not torch.allclose(uncapped[1, 0], expected, atol=1e-6), "pick data where the cap matters"
