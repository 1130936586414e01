"""The Triton batch-invariant kernels (matmul, RMSNorm, softmax) under Triton's CPU interpreter:
equal to a float64 reference to rounding, and a row's bits independent of the rows around it.

The interpreter runs each program with numpy, so these check the kernels' indexing, masking and
arithmetic; the GPU twins in ``test_batch_invariant_gpu.py`` check the compiled bits."""

from __future__ import annotations

import pytest
import torch
from triton_interpreter import interpreter, load_interpreted  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("interpreter")

#: (rows in the batch, where the row under test sits)
SIZES_AND_OFFSETS = [(1, 0), (2, 1), (17, 16), (64, 63), (65, 64), (130, 129), (100, 37)]
#: |ours - float64| <= bound * max(1, max |reference|)
BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def kernels():
    return {name: load_interpreted(f"layers/batch_invariant_triton/{name}.py")
            for name in ("matmul", "rmsnorm", "softmax")}


def randn(*shape, seed, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def assert_close_to(out, ref, dtype):
    err = float((out.double() - ref).abs().max())
    bound = BOUNDS[dtype] * max(1.0, float(ref.abs().max()))
    assert err <= bound, f"max error {err:.3g} > {bound:.3g}"


def with_row(row: torch.Tensor, n: int, offset: int, seed: int) -> torch.Tensor:
    """``n`` random rows with ``row`` at ``offset``."""
    batch = randn(n, row.shape[-1], seed=seed, dtype=row.dtype)
    batch[offset] = row
    return batch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1, 96, 200), (70, 40, 64), (130, 33, 129)])
def test_matmul_equals_the_float64_product_with_bias(kernels, dtype, m, n, k):
    x, w, b = randn(m, k, seed=1, dtype=dtype), randn(n, k, seed=2, dtype=dtype), randn(n, seed=3, dtype=dtype)
    out = kernels["matmul"].linear(x, w, b)
    assert out.dtype == dtype and out.shape == (m, n)
    assert_close_to(out, x.double() @ w.double().T + b.double(), dtype)
    assert_close_to(kernels["matmul"].linear(x, w), x.double() @ w.double().T, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_row_bits_do_not_depend_on_its_batch_or_place(kernels, dtype):
    w, b, x = randn(96, 200, seed=4, dtype=dtype), randn(96, seed=5, dtype=dtype), randn(1, 200, seed=6, dtype=dtype)
    alone = kernels["matmul"].linear(x, w, b)[0]
    for n, offset in SIZES_AND_OFFSETS:
        inside = kernels["matmul"].linear(with_row(x[0], n, offset, seed=7 + n), w, b)[offset]
        assert torch.equal(alone, inside), (n, offset)


def test_matmul_configuration_is_a_function_of_the_weight_only(kernels):
    config = kernels["matmul"].matmul_config
    assert config(4096, 4096, torch.bfloat16, 132).block_n == 32  # 128 column tiles for 132 SMs
    assert config(151936, 4096, torch.bfloat16, 132).block_n == 128
    assert {config(6144, 4096, torch.bfloat16, 132).block_m} == {64}


def test_matmul_keeps_leading_dims_and_refuses_mixed_dtypes(kernels):
    x, w = randn(3, 4, 32, seed=8), randn(8, 32, seed=9)
    assert kernels["matmul"].linear(x, w).shape == (3, 4, 8)
    assert kernels["matmul"].linear(x[:0], w).shape == (0, 4, 8)
    with pytest.raises(ValueError, match="one dtype"):
        kernels["matmul"].linear(x, w.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_equals_the_float64_formula_and_rows_are_independent(kernels, dtype):
    x, w = randn(37, 192, seed=10, dtype=dtype), randn(192, seed=11, dtype=dtype)
    out = kernels["rmsnorm"].rmsnorm(x, w, 1e-6)
    xd = x.double()
    ref = w.double() * xd / xd.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    assert out.dtype == dtype
    assert_close_to(out, ref, dtype)
    alone = kernels["rmsnorm"].rmsnorm(x[5:6], w, 1e-6)[0]
    for n, offset in SIZES_AND_OFFSETS:
        inside = kernels["rmsnorm"].rmsnorm(with_row(x[5], n, offset, seed=12 + n), w, 1e-6)[offset]
        assert torch.equal(alone, inside), (n, offset)


def test_rmsnorm_of_heads_keeps_the_shape_and_normalises_each_head(kernels):
    x, w = randn(5, 3, 24, seed=13), randn(24, seed=14)
    out = kernels["rmsnorm"].rmsnorm(x, w, 1e-6)
    xd = x.double()
    assert_close_to(out, w.double() * xd / xd.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt(),
                    torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [7, 1000, 10000])  # one partial block, one block, several
def test_log_softmax_and_softmax_equal_float64_in_float32(kernels, dtype, vocab):
    x = randn(6, vocab, seed=15, dtype=dtype, scale=5.0)
    lsm, sm = kernels["softmax"].log_softmax(x), kernels["softmax"].softmax(x)
    assert lsm.dtype == sm.dtype == torch.float32
    assert_close_to(lsm, torch.log_softmax(x.double(), -1), torch.float32)
    assert_close_to(sm, torch.softmax(x.double(), -1), torch.float32)


def test_log_softmax_row_bits_do_not_depend_on_its_batch_or_place(kernels):
    x = randn(1, 5000, seed=16, scale=5.0)
    alone = kernels["softmax"].log_softmax(x)[0]
    for n, offset in SIZES_AND_OFFSETS:
        inside = kernels["softmax"].log_softmax(with_row(x[0], n, offset, seed=17 + n))[offset]
        assert torch.equal(alone, inside), (n, offset)


def test_softmax_of_a_row_with_masked_entries_gives_them_zero(kernels):
    x = randn(2, 300, seed=18)
    x[:, 100:] = float("-inf")
    out = kernels["softmax"].softmax(x)
    assert torch.equal(out[:, 100:], torch.zeros(2, 200))
    assert_close_to(out[:, :100], torch.softmax(x[:, :100].double(), -1), torch.float32)
