"""The batch-invariant kernels on CUDA (run on the GPU machine: ``pytest -m gpu tests/layers``):
a row's bits are the same alone and in batches of 1..64 rows (and at any place in a large batch)
for matmul, RMSNorm, log-softmax and the gated activation, in bf16; the kernels agree with a
float64 reference to rounding; and they replay inside a CUDA graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hinge.layers import batch_invariant

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: |ours - float64| <= bound * max(1, max |reference|)
BOUNDS = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 1.6e-2}
#: shapes of the Qwen3-8B linears: fused qkv, o, fused gate/up, down; and an odd small one
WEIGHTS = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (1000, 200)]


def randn(*shape, seed, dtype=torch.bfloat16, scale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)


def assert_rows_invariant(fn, x: torch.Tensor, big: int = 4099):
    """``fn``'s rows of ``x`` (64 rows) equal alone, in every prefix batch of 1..64 rows, and at
    several places in a batch of ``big`` rows."""
    full = fn(x)
    for n in range(1, x.shape[0] + 1):
        part = fn(x[:n])
        assert torch.equal(part, full[:n]), f"rows of a batch of {n} differ from the batch of 64"
    for i in (0, 1, 31, 63):
        assert torch.equal(fn(x[i : i + 1])[0], full[i]), f"row {i} alone differs"
    crowd = torch.randn(big, *x.shape[1:], device="cuda").to(x.dtype)
    places = tuple(p for p in (0, 63, 64, 1000, big - 1) if p < big)  # 1000 only in a big crowd
    crowd[list(places)] = x[7]
    out = fn(crowd)
    for p in places:
        assert torch.equal(out[p], full[7]), f"row 7 at place {p} of {big} rows differs"


def assert_close_to(out, ref, dtype):
    err = float((out.double() - ref).abs().max())
    bound = BOUNDS[dtype] * max(1.0, float(ref.abs().max()))
    assert err <= bound, f"max error {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("n,k", WEIGHTS)
def test_matmul_rows_are_bit_identical_alone_and_in_batches_of_1_to_64_in_bf16(n, k):
    w, b = randn(n, k, seed=1, scale=k ** -0.5), randn(n, seed=2)
    x = randn(64, k, seed=3)
    assert_rows_invariant(lambda rows: batch_invariant.linear(rows, w), x)
    assert_rows_invariant(lambda rows: batch_invariant.linear(rows, w, b), x, big=300)


def test_lm_head_rows_are_bit_identical_alone_and_in_batches_of_1_to_64():
    w = randn(151936, 4096, seed=4, scale=4096 ** -0.5)
    assert_rows_invariant(lambda rows: batch_invariant.linear(rows, w), randn(64, 4096, seed=5),
                          big=130)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 64, 777])
def test_matmul_equals_the_float64_product(dtype, m):
    x, w, b = randn(m, 1024, seed=6, dtype=dtype), randn(768, 1024, seed=7, dtype=dtype), randn(768, seed=8, dtype=dtype)
    out = batch_invariant.linear(x, w, b)
    assert out.dtype == dtype
    assert_close_to(out, x.double() @ w.double().T + b.double(), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_float32_and_bfloat16_rows_are_invariant(dtype):
    w = randn(512, 768, seed=9, dtype=dtype)
    assert_rows_invariant(lambda rows: batch_invariant.linear(rows, w), randn(64, 768, seed=10, dtype=dtype))


@pytest.mark.parametrize("width,heads", [(4096, 1), (128, 32)])
def test_rmsnorm_rows_are_bit_identical_alone_and_in_batches_in_bf16(width, heads):
    w = randn(width, seed=11)
    shape = (64, heads, width) if heads > 1 else (64, width)
    x = randn(*shape, seed=12, scale=3.0)
    assert_rows_invariant(lambda rows: batch_invariant.rmsnorm(rows, w, 1e-6), x)
    assert_rows_invariant(lambda rows: batch_invariant.rmsnorm(rows, w, 1e-6, offset=1.0), x, big=200)
    xd = x.double()
    ref = w.double() * xd / xd.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    assert_close_to(batch_invariant.rmsnorm(x, w, 1e-6), ref, torch.bfloat16)


@pytest.mark.parametrize("vocab,dtype", [(151936, torch.float32), (151936, torch.bfloat16), (128, torch.float32)])
def test_log_softmax_rows_are_bit_identical_alone_and_in_batches(vocab, dtype):
    x = randn(64, vocab, seed=13, dtype=dtype, scale=4.0)
    assert_rows_invariant(batch_invariant.log_softmax, x, big=300)
    assert_rows_invariant(batch_invariant.softmax, x, big=300)
    assert_close_to(batch_invariant.log_softmax(x), torch.log_softmax(x.double(), -1), torch.float32)
    assert_close_to(batch_invariant.softmax(x), torch.softmax(x.double(), -1), torch.float32)


def test_gated_activation_rows_are_bit_identical_alone_and_in_batches():
    x = randn(64, 2 * 12288, seed=14, scale=3.0)
    assert_rows_invariant(lambda rows: batch_invariant.gated_activation(rows, F.silu), x, big=300)


def test_kernels_replay_in_a_cuda_graph_with_the_eager_bits():
    w, b, nw = randn(2048, 1024, seed=15), randn(2048, seed=16), randn(2048, seed=17)
    static = randn(8, 1024, seed=18)

    def step(x):
        h = batch_invariant.rmsnorm(batch_invariant.linear(x, w, b), nw, 1e-6)
        return batch_invariant.log_softmax(h)

    step(static)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(static)
    for seed in (19, 20):
        fresh = randn(8, 1024, seed=seed)
        static.copy_(fresh)
        graph.replay()
        assert torch.equal(out, step(fresh))


def test_cuda_tensors_take_the_triton_kernels_not_the_16_row_blocks():
    from hinge.layers import batch_invariant_triton as triton_kernels

    x, w, nw = randn(40, 512, seed=21), randn(256, 512, seed=22), randn(512, seed=23)
    assert torch.equal(batch_invariant.linear(x, w), triton_kernels.linear(x, w))
    assert torch.equal(batch_invariant.rmsnorm(x, nw, 1e-6), triton_kernels.rmsnorm(x, nw, 1e-6))
    assert torch.equal(batch_invariant.log_softmax(x), triton_kernels.log_softmax(x))
