"""The kit's fixtures, as a plugin's tests get them from the pytest11 entry point."""

from __future__ import annotations

import torch


def test_plugin_manager_fixture_holds_only_the_builtins(plugin_manager):
    assert [r["name"] for r in plugin_manager.listing()] == ["hinge"]
    assert plugin_manager.names("attention") == ["flashinfer", "torch", "triton"]


def test_tiny_model_config_builds_a_transformers_config(tiny_model_config):
    hf = tiny_model_config.hf_config()
    assert (hf.num_attention_heads, hf.num_key_value_heads, hf.head_dim) == (4, 2, 16)
    layer = tiny_model_config.attention_layer(kv_layer_id=1)
    assert layer.scale == 16 ** -0.5 and layer.num_kv_heads == 2


def test_make_batch_and_references_fit_together(make_batch, reference_attention, reference_linear):
    case = make_batch([4, 0], [1, 6])
    out = reference_attention(case.q, case.kv, case.layer, case.batch, k=case.k, v=case.v)
    assert out.shape == case.q.shape and out.dtype == torch.float64 and not out.isnan().any()
    x, w = torch.randn(3, 5), torch.randn(2, 5)
    assert torch.allclose(reference_linear(x, w), (x @ w.T).double(), atol=1e-6)
