from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from hinge.layers.rotary import CHUNK, RotaryEmbedding, compute_inv_freq, rope_parameters

LLAMA3 = {
    "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
}


def test_llama3_inverse_frequencies_match_transformers():
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=2, rope_parameters=dict(LLAMA3))
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    ours = compute_inv_freq(rope_parameters(cfg), 64)
    assert torch.equal(ours, ref)
    default = compute_inv_freq({"rope_theta": 500000.0}, 64)
    assert not torch.equal(ours, default), "the scaling must change some frequencies"


def test_linear_scaling_divides_frequencies():
    base = compute_inv_freq({"rope_theta": 10000.0}, 32)
    scaled = compute_inv_freq({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 32)
    torch.testing.assert_close(scaled, base / 4)


def test_unknown_rope_type_lists_supported():
    with pytest.raises(ValueError, match="'yarn'.*default, linear, llama3"):
        compute_inv_freq({"rope_type": "yarn", "rope_theta": 1.0}, 8)


def test_rotation_matches_complex_multiplication():
    rope = RotaryEmbedding(16, {"rope_theta": 10000.0})
    pos = torch.tensor([0, 3, 100])
    x = torch.randn(3, 2, 16, dtype=torch.float64)
    cos, sin = rope(pos)
    got = rope.apply(x.float(), cos, sin).double()
    angles = pos[:, None].double() * rope.inv_freq.double()[None, :]
    z = torch.complex(x[..., :8], x[..., 8:]) * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    torch.testing.assert_close(got, torch.cat([z.real, z.imag], dim=-1), rtol=1e-5, atol=1e-5)


def test_partial_rotary_passes_the_tail_dims_through():
    rope = RotaryEmbedding(16, {"rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    assert rope.rotary_dim == 4
    x = torch.randn(5, 3, 16)
    cos, sin = rope(torch.arange(5))
    out = rope.apply(x, cos, sin)
    assert torch.equal(out[..., 4:], x[..., 4:])
    full = RotaryEmbedding(4, {"rope_theta": 10000.0})
    assert torch.equal(out[..., :4], full.apply(x[..., :4], *full(torch.arange(5))))


def test_table_values_do_not_depend_on_which_positions_were_asked_first():
    a, b = RotaryEmbedding(16, {"rope_theta": 10000.0}), RotaryEmbedding(16, {"rope_theta": 10000.0})
    pos = torch.tensor([5, CHUNK + 7, 3 * CHUNK - 1])
    a(torch.tensor([1]))
    b(torch.tensor([3 * CHUNK + 5]))
    for (ca, sa), (cb, sb) in [(a(pos), b(pos))]:
        assert torch.equal(ca, cb) and torch.equal(sa, sb)
