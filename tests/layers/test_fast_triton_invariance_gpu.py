"""The fast kernels deterministic mode takes (``fast_triton.enabled(..., invariant=True)``) give a
row the same bits alone and in any batch on CUDA (run on the GPU host: ``pytest -m gpu
tests/layers/test_fast_triton_invariance_gpu.py``): add+RMSNorm, q/k-norm+rope, the gated
DeltaNet's gates and its gated norm with one row a program, at Qwen3-8B and Qwen3.5-9B sizes.
Each output row of a 64-row batch is compared with the same row computed alone, in a batch of 2,
17 and 63 rows at another offset: that is what lets a decode row equal a prefill row, and a
cache hit equal a cold run, in deterministic mode."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ROWS = 64
#: (start, stop) slices of the 64 rows, each run as its own batch
SLICES = [(5, 6), (0, 1), (63, 64), (30, 32), (3, 20), (1, 64)]


def randn(*shape, seed, dtype=torch.bfloat16, scale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)


def assert_rows_invariant(run, inputs):
    """``run(*rows_of_inputs)`` -> tensor or tuple of tensors with rows along dim 0."""
    def as_tuple(x):
        return x if isinstance(x, tuple) else (x,)

    full = as_tuple(run(*inputs))
    for start, stop in SLICES:
        part = as_tuple(run(*(x[start:stop].contiguous() if x.shape[0] == ROWS else x for x in inputs)))
        for f, p in zip(full, part, strict=True):
            assert torch.equal(f[start:stop], p), f"rows {start}:{stop} differ from the full batch"


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_add_rmsnorm_gives_a_row_its_bits_in_any_batch(offset):
    from hinge.layers.fast_triton.add_rmsnorm import add_rmsnorm

    w = randn(4096, seed=1, scale=0.2) + 1 - offset
    assert_rows_invariant(lambda x, r: add_rmsnorm(x, r, w, 1e-6, offset),
                          (randn(ROWS, 4096, seed=2), randn(ROWS, 4096, seed=3)))


@pytest.mark.parametrize("d,factor", [(128, 1.0), (256, 0.25)])
def test_qk_norm_rope_gives_a_row_its_bits_in_any_batch(d, factor):
    from hinge.layers.fast_triton.qk_norm_rope import qk_norm_rope
    from hinge.layers.rotary import RotaryEmbedding

    rotary = RotaryEmbedding(d, {"rope_theta": 1000000.0, "rope_type": "default",
                                 "partial_rotary_factor": factor})
    qkv = randn(ROWS, 48 * d, seed=4)
    q, k = qkv[:, : 32 * d].view(ROWS, 32, d), qkv[:, 32 * d: 40 * d].view(ROWS, 8, d)
    cos, sin = rotary(torch.arange(ROWS, device="cuda") * 37, 37 * ROWS, dtype=torch.bfloat16)
    qw, kw = randn(d, seed=5, scale=0.2) + 1, randn(d, seed=6, scale=0.2) + 1
    assert_rows_invariant(lambda q, k, c, s: qk_norm_rope(q, k, qw, kw, 1e-6, c, s), (q, k, cos, sin))


def test_gdn_gating_gives_a_row_its_bits_in_any_batch():
    from hinge.layers.fast_triton.gdn_gating import gdn_gating

    ab = randn(ROWS, 64, seed=7, scale=2.0)
    a_log, dt_bias = randn(32, seed=8, dtype=torch.float32), randn(32, seed=9, dtype=torch.float32)
    assert_rows_invariant(lambda a, b: gdn_gating(a, b, a_log, dt_bias), (ab[:, :32], ab[:, 32:]))


def test_gated_rmsnorm_with_one_row_a_program_gives_a_row_its_bits_in_any_batch():
    from hinge.layers.fast_triton.gated_rmsnorm import gated_rmsnorm

    w = randn(128, seed=10, scale=0.2) + 1
    x, z = randn(ROWS, 32, 128, seed=11), randn(ROWS, 32, 128, seed=12)
    assert_rows_invariant(lambda x, z: gated_rmsnorm(x, z, w, 1e-6, rows=1), (x, z))
    # and the default tiling (several rows a program) stays within one rounding of it
    torch.testing.assert_close(gated_rmsnorm(x, z, w, 1e-6), gated_rmsnorm(x, z, w, 1e-6, rows=1),
                               rtol=1e-2, atol=1e-2)
