"""The Triton W4A16 GEMM against the CPU reference: under Triton's interpreter on CPU (every
tile path: split-K, deterministic, ragged M, bias) and, marked gpu, on CUDA across Qwen3-8B-like
shapes, in a captured CUDA graph, and batch invariant in deterministic mode."""

from __future__ import annotations

import pytest
import torch
from nvfp4_interpreter import load_interpreted, patch_interpreter

from hinge_nvfp4 import format as fp4
from hinge_nvfp4 import reference


def problem(m: int, n: int, k: int, dtype=torch.float32, seed: int = 0, device: str = "cpu"):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * torch.rand(n, 1, generator=gen)
    w[0, :16] = 0.0  # a zero block
    packed, scales, s2 = fp4.quantize_weight(w)
    row_scale = torch.full((n,), float(s2)) * (1 + torch.arange(n) % 3)  # partitions with their own scale
    x = torch.randn(m, k, generator=gen).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    return [t.to(device) for t in (x, packed, scales, row_scale, bias)]


@pytest.fixture
def gemm(monkeypatch):
    patch_interpreter(monkeypatch)
    return load_interpreted("triton_gemm")


@pytest.mark.parametrize("m, tile", [
    (1, (16, 32, 64, 1)), (5, (16, 32, 64, 2)), (19, (16, 64, 32, 1)), (33, (32, 32, 64, 3)),
])
def test_interpreted_kernel_equals_the_reference(gemm, m, tile):
    """Ragged M, N not a multiple of the tile, K split in 1-3 parts, a zero block, float32."""
    x, packed, scales, row_scale, bias = problem(m, 48, 96, seed=m)
    t = gemm.Tile(*tile)
    got = gemm.nvfp4_linear(x, packed, scales, row_scale, bias, tile=t)
    expected = reference.linear(x, packed, scales, row_scale, bias)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5), float((got - expected).abs().max())


def test_interpreted_kernel_in_bfloat16_matches_within_one_rounding(gemm):
    x, packed, scales, row_scale, bias = problem(7, 32, 64, dtype=torch.bfloat16, seed=9)
    got = gemm.nvfp4_linear(x, packed, scales, row_scale, None, tile=gemm.Tile(16, 32, 32))
    expected = reference.linear(x, packed, scales, row_scale, None)
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), expected.float(), rtol=1e-2, atol=1e-2)


def test_interpreted_deterministic_tile_rows_do_not_depend_on_the_batch(gemm):
    x, packed, scales, row_scale, bias = problem(20, 32, 64, seed=3)
    tile = gemm.pick_tile(20, 32, 64, deterministic=True)
    assert tile == gemm.DETERMINISTIC and tile.split_k == 1
    full = gemm.nvfp4_linear(x, packed, scales, row_scale, bias, tile=gemm.Tile(16, 32, 64))
    for rows in (slice(0, 1), slice(7, 8), slice(3, 19)):
        alone = gemm.nvfp4_linear(x[rows], packed, scales, row_scale, bias, tile=gemm.Tile(16, 32, 64))
        assert torch.equal(alone, full[rows])


def test_decode_tiles_split_k_only_when_the_tiles_leave_sms_idle():
    from hinge_nvfp4.triton_gemm import pick_tile

    assert pick_tile(1, 6144, 4096, False).split_k > 1  # 96 tiles < 132 SMs
    assert pick_tile(256, 24576, 4096, False).split_k == 1
    assert pick_tile(1, 6144, 4096, True).split_k == 1


# -- on the GPU ----------------------------------------------------------------------------------

QWEN3_8B = [(6144, 4096), (24576, 4096), (4096, 12288), (4096, 4096)]  # qkv, gate|up, down, o


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 16, 17, 64, 250])
@pytest.mark.parametrize("deterministic", [False, True])
def test_cuda_kernel_equals_the_reference_on_qwen3_8b_shapes(m, deterministic):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4.triton_gemm import nvfp4_linear

    for n, k in QWEN3_8B:
        x, packed, scales, row_scale, bias = problem(m, n, k, dtype=torch.bfloat16, seed=m, device="cuda")
        got = nvfp4_linear(x, packed, scales, row_scale, bias, deterministic=deterministic)
        expected = reference.linear(x, packed, scales, row_scale, bias)
        err = float((got.float() - expected.float()).abs().max())
        assert err <= 2e-2 * max(1.0, float(expected.abs().max())), (n, k, err)


@pytest.mark.gpu
def test_cuda_deterministic_rows_are_batch_invariant():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4.triton_gemm import nvfp4_linear

    x, packed, scales, row_scale, bias = problem(300, 6144, 4096, dtype=torch.bfloat16, device="cuda")
    full = nvfp4_linear(x, packed, scales, row_scale, bias, deterministic=True)
    for rows in (slice(0, 1), slice(100, 101), slice(17, 80), slice(299, 300)):
        assert torch.equal(nvfp4_linear(x[rows], packed, scales, row_scale, bias, deterministic=True), full[rows])


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(4, 6144, 4096), (1, 4096, 12288), (16, 4096, 12288),
                                     (64, 6144, 4096)],
                         ids=["gemv-4", "gemv-1", "gemv-16", "tiles-64"])
def test_cuda_graph_replay_equals_eager(m, n, k):
    """The decode GEMV (M <= 16, default mode) and the tiled GEMM (M = 64) in a CUDA graph."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4.triton_gemm import nvfp4_linear

    x, packed, scales, row_scale, bias = problem(m, n, k, dtype=torch.bfloat16, device="cuda")
    nvfp4_linear(x, packed, scales, row_scale, bias)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = nvfp4_linear(x, packed, scales, row_scale, bias)
    new = torch.randn_like(x)
    x.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, nvfp4_linear(new, packed, scales, row_scale, bias))
