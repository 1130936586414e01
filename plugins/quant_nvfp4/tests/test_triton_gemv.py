"""The decode-size W4A16 GEMV (hinge_nvfp4.triton_gemv) against the CPU reference.

- Under Triton's interpreter: ragged M 1..16, N and K not multiples of the blocks, both the
  CUDA-core and the tensor-core tilings, split-K with and without a ragged last slice, bias or not;
  every byte of codes and every finite fp8 scale decoded exactly.
- ``nvfp4_linear`` sends M <= 16 to it in default mode only (deterministic mode keeps the fixed,
  batch-invariant GEMM tiles).
- Marked gpu: the Qwen3-8B shapes at M 1..16, every swept tiling, run-to-run bits (the CUDA
  graph replay of both paths is in test_triton_gemm.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from nvfp4_interpreter import load_interpreted, patch_interpreter
from test_triton_gemm import QWEN3_8B, problem

from hinge_nvfp4 import reference

ROWS = [1, 2, 3, 5, 8, 13, 16]
#: (block_n, block_k, split_k, dot): K = 208 is 13 groups, N = 40 is not a multiple of 16 or 32
TILINGS = [(16, 64, 1, False), (32, 32, 3, False), (16, 64, 2, True), (32, 128, 1, True)]


@pytest.fixture
def kernels(monkeypatch):
    """The interpreted gemv, and the interpreted gemm module wired to it."""
    patch_interpreter(monkeypatch)
    gemv = load_interpreted("triton_gemv")
    gemm = load_interpreted("triton_gemm")
    groups = load_interpreted("triton_gemv_groups")
    monkeypatch.setattr(gemm, "triton_gemv", gemv)
    monkeypatch.setattr(gemv, "_groups", lambda: groups)
    return gemv, gemm


def assert_matches(got, expected, bound):
    err = float((got.double() - expected.double()).abs().max())
    assert err <= bound * max(1.0, float(expected.abs().max())), err


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("tiling", TILINGS)
def test_interpreted_gemv_equals_the_reference_for_ragged_rows_in_every_tiling(kernels, m, tiling):
    gemv, _ = kernels
    n_, k_, split, dot = tiling
    x, packed, scales, row_scale, bias = problem(m, 40, 208, seed=m)
    config = gemv.GemvConfig(block_n=n_, block_k=k_, split_k=split, dot=dot)
    got = gemv.nvfp4_gemv(x, packed, scales, row_scale, bias if m % 2 else None, config=config)
    expected = reference.linear(x, packed, scales, row_scale, bias if m % 2 else None)
    assert got.shape == (m, 40) and got.dtype == torch.float32
    assert_matches(got, expected, 1e-5)


@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("tiling", TILINGS)
def test_the_hand_prefetch_gives_the_same_bits_in_every_tiling(kernels, m, tiling):
    """``prefetch`` moves loads a step earlier and nothing else: ragged K (208 = 3 steps of 64,
    the last partly past K), splits whose last slice is short, both paths."""
    gemv, _ = kernels
    n_, k_, split, dot = tiling
    x, packed, scales, row_scale, bias = problem(m, 40, 208, seed=m + 7)
    runs = [gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=gemv.GemvConfig(
        block_n=n_, block_k=k_, split_k=split, dot=dot, prefetch=prefetch)) for prefetch in (False, True)]
    assert torch.equal(runs[0], runs[1])
    assert_matches(runs[1], reference.linear(x, packed, scales, row_scale, bias), 1e-5)


@pytest.mark.parametrize("tiling", [(8, 64, 1), (16, 32, 3), (4, 128, 2), (32, 64, 1)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_group_layout_kernel_equals_the_reference_and_the_words_kernel(kernels, tiling, with_bias):
    """One row, N = 40 (ragged for every block), K = 208 (13 groups: ragged steps), splits whose
    last slice is short; within float32 rounding of the ``words`` kernel (the same sums, other
    reduction trees across groups)."""
    gemv, _ = kernels
    n_, k_, split = tiling
    x, packed, scales, row_scale, bias = problem(1, 40, 208, seed=11)
    bias = bias if with_bias else None
    got = gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=gemv.GemvConfig(
        block_n=n_, block_k=k_, split_k=split, layout="groups"))
    words = gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=gemv.GemvConfig(
        block_n=n_, block_k=k_, split_k=split))
    assert got.shape == (1, 40) and got.dtype == torch.float32
    assert_matches(got, reference.linear(x, packed, scales, row_scale, bias), 1e-5)
    assert_matches(got, words, 1e-6)


def test_the_group_layout_takes_one_row_only_and_other_shapes_take_the_words_kernel(kernels, monkeypatch):
    gemv, _ = kernels
    x, packed, scales, row_scale, bias = problem(3, 40, 208, seed=12)
    monkeypatch.setattr(gemv, "_groups", lambda: pytest.fail("three rows reached the groups kernel"))
    got = gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=gemv.GemvConfig(
        block_n=8, block_k=64, layout="groups"))
    assert_matches(got, reference.linear(x, packed, scales, row_scale, bias), 1e-5)
    with pytest.raises(ValueError, match="layout must be"):
        gemv.nvfp4_gemv(x[:1], packed, scales, row_scale, bias, config=gemv.GemvConfig(layout="rows"))


@pytest.mark.parametrize("dot", [False, True])
def test_interpreted_gemv_in_bfloat16_matches_within_one_rounding(kernels, dot):
    gemv, _ = kernels
    x, packed, scales, row_scale, bias = problem(3, 24, 96, dtype=torch.bfloat16, seed=5)
    config = gemv.GemvConfig(block_n=16, block_k=64, split_k=2, dot=dot)
    got = gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=config)
    expected = reference.linear(x, packed, scales, row_scale, bias)
    assert got.dtype == torch.bfloat16
    assert_matches(got.float(), expected.float(), 1.6e-2)


@pytest.mark.parametrize("dot", [False, True])
def test_interpreted_gemv_decodes_every_code_byte_and_every_finite_scale_exactly(kernels, dot):
    """Byte (n, c) = 7n + c mod 256, so the columns read hold every byte value; the block scales run
    through fp8 0x00..0x7E (zero, subnormals, normals up to 448); x is one-hot, so each output is
    one decoded code times its scale, exact in float32."""
    gemv, _ = kernels
    n, k = 127, 512
    byte = (torch.arange(n)[:, None] * 7 + torch.arange(k // 2)[None, :]) % 256
    packed = byte.to(torch.uint8)
    scales = (torch.arange(n)[:, None] + torch.arange(k // 16)[None, :]) % 127
    scales = scales.to(torch.uint8).view(torch.float8_e4m3fn)
    row_scale = torch.ones(n)
    x = torch.eye(k)[::9][:16].contiguous()  # rows pick k = 0, 9, 18, ... (both nibbles, all words)
    config = gemv.GemvConfig(block_n=32, block_k=128, split_k=2, dot=dot)
    got = gemv.nvfp4_gemv(x, packed, scales, row_scale, None, config=config)
    expected = reference.linear(x, packed, scales, row_scale, None)
    assert torch.equal(got, expected)


def test_the_group_layout_decodes_every_code_byte_and_every_finite_scale_exactly(kernels):
    """The exact-decoding check above, one one-hot row at a time (the kernel takes one row),
    and in bfloat16 within one rounding of the reference."""
    gemv, _ = kernels
    n, k = 127, 512
    packed = ((torch.arange(n)[:, None] * 7 + torch.arange(k // 2)[None, :]) % 256).to(torch.uint8)
    scales = ((torch.arange(n)[:, None] + torch.arange(k // 16)[None, :]) % 127).to(torch.uint8)
    scales = scales.view(torch.float8_e4m3fn)
    row_scale = torch.ones(n)
    config = gemv.GemvConfig(block_n=32, block_k=128, split_k=2, layout="groups")
    for col in (0, 9, 17, 254, 255, 511):
        x = torch.eye(k)[col:col + 1].contiguous()
        got = gemv.nvfp4_gemv(x, packed, scales, row_scale, None, config=config)
        assert torch.equal(got, reference.linear(x, packed, scales, row_scale, None)), col
    x, packed, scales, row_scale, bias = problem(1, 24, 96, dtype=torch.bfloat16, seed=5)
    got = gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=gemv.GemvConfig(
        block_n=16, block_k=64, layout="groups"))
    assert got.dtype == torch.bfloat16
    assert_matches(got.float(), reference.linear(x, packed, scales, row_scale, bias).float(), 1.6e-2)


def test_default_mode_sends_decode_sizes_to_the_gemv_and_deterministic_mode_never(kernels):
    gemv, gemm = kernels
    calls = []
    real = gemv.nvfp4_gemv
    gemv.nvfp4_gemv = lambda *a, **kw: calls.append(a[0].shape[0]) or real(*a, **kw)
    try:
        for m in (1, 16, 17):
            for deterministic in (False, True):
                x, packed, scales, row_scale, bias = problem(m, 32, 64, seed=m)
                got = gemm.nvfp4_linear(x, packed, scales, row_scale, bias, deterministic=deterministic)
                assert_matches(got, reference.linear(x, packed, scales, row_scale, bias), 1e-5)
    finally:
        gemv.nvfp4_gemv = real
    assert calls == [1, 16]


def test_deterministic_rows_without_a_forced_tile_do_not_depend_on_the_batch(kernels):
    _, gemm = kernels
    x, packed, scales, row_scale, bias = problem(20, 32, 64, seed=4)
    full = gemm.nvfp4_linear(x, packed, scales, row_scale, bias, deterministic=True)
    for rows in (slice(0, 1), slice(5, 7), slice(3, 19)):
        assert torch.equal(gemm.nvfp4_linear(x[rows], packed, scales, row_scale, bias, deterministic=True),
                           full[rows])


def test_default_config_splits_k_only_while_the_tiles_leave_sms_idle():
    from hinge_nvfp4.triton_gemv import default_config

    assert default_config(1, 24576, 4096).split_k == 1  # 3072 tiles of 8 rows: >= 8 per SM
    assert default_config(1, 6144, 4096).split_k > 1
    assert default_config(1, 4096, 12288).split_k > 1
    assert default_config(16, 24576, 4096).split_k == 1  # 384 tiles of 64 rows: >= 2 per SM
    assert default_config(16, 4096, 4096).split_k > 1
    assert not default_config(2, 6144, 4096).dot and default_config(3, 6144, 4096).dot
    small = default_config(1, 64, 256)
    assert small.split_k == 1  # too few K steps to split


def test_default_config_takes_the_tilings_the_h200_sweep_found_fastest():
    """docs/benchmarks.md, sixth session: at M = 1 every Qwen3-8B shape was fastest with 8 rows
    of 512 codes on 2 warps, at M = 16 with 64 rows of 128 codes on the tensor cores; the split
    rule then picks the sweep's best split for qkv, gate_up and o at M = 1 and for all four at
    M = 16 (down at M = 1: 4, measured 23.3 us against the best 21.7 at 8)."""
    from hinge_nvfp4.triton_gemv import GemvConfig, default_config

    shapes = {"qkv": (6144, 4096), "gate_up": (24576, 4096), "down": (4096, 12288), "o": (4096, 4096)}
    m1 = {name: default_config(1, n, k) for name, (n, k) in shapes.items()}
    m16 = {name: default_config(16, n, k) for name, (n, k) in shapes.items()}
    assert {c.split_k for c in m1.values()} and all(
        (c.block_n, c.block_k, c.num_warps, c.dot) == (8, 512, 2, False) for c in m1.values())
    assert {name: c.split_k for name, c in m1.items()} == {"qkv": 2, "gate_up": 1, "down": 4, "o": 4}
    assert all((c.block_n, c.block_k, c.num_warps, c.dot) == (64, 128, 4, True) for c in m16.values())
    assert {name: c.split_k for name, c in m16.items()} == {"qkv": 4, "gate_up": 1, "down": 8, "o": 8}
    assert isinstance(m1["qkv"], GemvConfig)


def test_supports_refuses_rows_that_cannot_be_read_as_words():
    from hinge_nvfp4.triton_gemv import supports

    x = torch.randn(1, 64)
    packed = torch.zeros(8, 40, dtype=torch.uint8)
    assert supports(x, packed[:, :32])
    assert not supports(x, packed[:, 1:33])  # storage offset 1
    assert not supports(x, torch.zeros(8, 34, dtype=torch.uint8)[:, :32])  # row stride 34
    assert not supports(torch.randn(17, 64), packed[:, :32])
    assert not supports(torch.randn(64, 2).t(), packed[:, :32])


# -- on the GPU ----------------------------------------------------------------------------------

SWEEP = [(8, 512, None, False), (16, 512, None, False), (32, 512, None, False), (64, 256, None, False),
         (16, 256, None, True), (32, 256, None, True), (64, 128, None, True), (32, 512, 4, False),
         (32, 256, 2, True), (8, 512, 8, False), (8, 1024, None, False), (4, 1024, None, False),
         (8, 2048, None, False), (128, 128, None, True)]
SWEEP_PREFETCH = [(8, 512, None, False), (8, 1024, 2, False), (64, 128, None, True)]
SWEEP_GROUPS = [(8, 512, None), (8, 512, 4), (16, 512, None), (8, 1024, 2), (4, 512, None)]


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
def test_cuda_gemv_equals_the_reference_on_qwen3_8b_shapes(m):
    _cuda()
    from hinge_nvfp4.triton_gemm import nvfp4_linear

    for n, k in QWEN3_8B + [(1000, 4112)]:
        x, packed, scales, row_scale, bias = problem(m, n, k, dtype=torch.bfloat16, seed=m, device="cuda")
        got = nvfp4_linear(x, packed, scales, row_scale, bias)
        expected = reference.linear(x, packed, scales, row_scale, bias)
        assert_matches(got.float(), expected.float(), 2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("tiling, prefetch", [(t, False) for t in SWEEP] + [(t, True) for t in SWEEP_PREFETCH])
def test_cuda_gemv_every_swept_tiling_is_correct_and_the_same_bits_every_run(tiling, prefetch):
    _cuda()
    from hinge_nvfp4 import triton_gemv

    block_n, block_k, split, dot = tiling
    for m in (1, 5, 16):
        x, packed, scales, row_scale, bias = problem(m, 6144, 4096, dtype=torch.bfloat16, seed=m, device="cuda")
        split_k = split or triton_gemv.default_config(m, 6144, 4096).split_k
        config = triton_gemv.GemvConfig(block_n=block_n, block_k=block_k, split_k=split_k, dot=dot,
                                        prefetch=prefetch)
        got = triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=config)
        assert_matches(got.float(), reference.linear(x, packed, scales, row_scale, bias).float(), 2e-2)
        assert torch.equal(got, triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=config))
        if prefetch and not dot:  # the same arithmetic as without (a tl.dot's MMA order is the
            # compiler's: the H200 gave other bits for 64 x 128 dot with prefetch, 2026-12-02)
            plain = dataclasses.replace(config, prefetch=False)
            assert torch.equal(got, triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=plain))


@pytest.mark.gpu
@pytest.mark.parametrize("tiling", SWEEP_GROUPS)
def test_cuda_group_layout_gemv_is_correct_on_qwen3_8b_shapes_and_the_same_bits_every_run(tiling):
    _cuda()
    from hinge_nvfp4 import triton_gemv

    block_n, block_k, split = tiling
    for n, k in QWEN3_8B + [(1000, 4112)]:
        x, packed, scales, row_scale, bias = problem(1, n, k, dtype=torch.bfloat16, seed=3, device="cuda")
        split_k = split or triton_gemv.default_config(1, n, k).split_k
        config = triton_gemv.GemvConfig(block_n=block_n, block_k=block_k, split_k=split_k, layout="groups")
        got = triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=config)
        assert_matches(got.float(), reference.linear(x, packed, scales, row_scale, bias).float(), 2e-2)
        assert torch.equal(got, triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=config))

