"""The GEMV that asks for all of its weights before its wait (hinge_nvfp4.triton_gemv_early).

- Under Triton's interpreter (launched without PDL: the interpreter has no grid dependencies):
  ragged M, N not a multiple of ``block_n``, K in 1..5 steps, both paths, bias or not, against
  the CPU reference and bit for bit against ``triton_gemv``'s unsplit kernel of the same tiling
  (the same ``accumulate`` steps in the same order).
- A K no steps can make is refused with the fix.
- Marked gpu: Qwen3-8B's shapes at 1, 5 and 16 rows launched early, in a CUDA graph chain of
  launches that read each other's output (so the wait is what orders them), equal to eager
  launches without PDL and to ``triton_gemv``'s unsplit kernel.
"""

from __future__ import annotations

import pytest
import torch
from nvfp4_interpreter import load_interpreted, patch_interpreter
from test_triton_gemm import QWEN3_8B, problem
from test_triton_gemv import assert_matches

from hinge_nvfp4 import reference


@pytest.fixture
def kernels(monkeypatch):
    patch_interpreter(monkeypatch)
    return load_interpreted("triton_gemv_early"), load_interpreted("triton_gemv")


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("tiling", [(16, 64, 1, False), (32, 64, 3, False), (16, 32, 5, True),
                                    (32, 128, 2, True)])
def test_early_gemv_equals_the_reference_and_the_unsplit_gemv_bit_for_bit(kernels, m, tiling):
    early, gemv = kernels
    block_n, block_k, steps, dot = tiling
    k = block_k * steps
    bias_or_none = (lambda b: b) if m % 2 else (lambda b: None)
    x, packed, scales, row_scale, bias = problem(m, 40, k, seed=m + k)
    config = early.EarlyConfig(block_n=block_n, block_k=block_k, dot=dot, early=False)
    got = early.nvfp4_gemv_early(x, packed, scales, row_scale, bias_or_none(bias), config=config)
    expected = reference.linear(x, packed, scales, row_scale, bias_or_none(bias))
    assert got.shape == (m, 40) and got.dtype == torch.float32
    assert_matches(got, expected, 1e-5)
    same = gemv.GemvConfig(block_n=block_n, block_k=block_k, split_k=1, dot=dot)
    assert torch.equal(got, gemv.nvfp4_gemv(x, packed, scales, row_scale, bias_or_none(bias), config=same))


@pytest.mark.parametrize("k, block_k", [(208, 64), (16384, 512), (4096, 96), (64, 16)])
def test_a_k_no_steps_make_is_refused_with_the_fix(k, block_k):
    from hinge_nvfp4.triton_gemv_early import EarlyConfig, steps_for

    with pytest.raises(ValueError, match=f"block_k = {block_k} does not split K = {k}.*power of two"):
        steps_for(k, EarlyConfig(block_k=block_k))


def test_k_in_one_to_sixteen_power_of_two_steps_is_taken():
    from hinge_nvfp4.triton_gemv_early import EarlyConfig, steps_for

    assert [steps_for(k, EarlyConfig(block_k=1024)) for k in (1024, 3072, 12288, 16384)] == [1, 3, 12, 16]


def _chain(config, x, weight, launches=4):
    """``launches`` GEMVs, each reading the last one's output (its first K columns) as its x."""
    from hinge_nvfp4.triton_gemv_early import nvfp4_gemv_early

    k = weight[0].shape[1] * 2
    for _ in range(launches):
        x = nvfp4_gemv_early(x[:, :k], *weight, config=config)
    return x


# (block_n, block_k, warps, dot) a Qwen3-8B shape's K can take
GPU_TILINGS = [(16, 4096, 8, False), (8, 4096, 4, False), (32, 1024, 8, True), (16, 2048, 8, False)]


@pytest.mark.gpu
@pytest.mark.parametrize("tiling", GPU_TILINGS)
def test_cuda_early_gemv_in_a_graph_chain_equals_eager_and_the_unsplit_gemv(tiling):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4 import triton_gemv
    from hinge_nvfp4.triton_gemv_early import EarlyConfig, nvfp4_gemv_early

    block_n, block_k, warps, dot = tiling
    for n, k in QWEN3_8B:
        for m in (1, 5, 16):
            x, packed, scales, row_scale, bias = problem(m, n, k, dtype=torch.bfloat16, seed=m, device="cuda")
            early = EarlyConfig(block_n=block_n, block_k=block_k, num_warps=warps, dot=dot)
            late = EarlyConfig(block_n=block_n, block_k=block_k, num_warps=warps, dot=dot, early=False)
            got = nvfp4_gemv_early(x, packed, scales, row_scale, bias, config=early)
            assert_matches(got.float(), reference.linear(x, packed, scales, row_scale, bias).float(), 2e-2)
            assert torch.equal(got, nvfp4_gemv_early(x, packed, scales, row_scale, bias, config=late))
            if not dot:  # a tl.dot's MMA order is the compiler's (cf. test_triton_gemv)
                same = triton_gemv.GemvConfig(block_n=block_n, block_k=block_k, split_k=1, dot=dot,
                                              num_warps=warps)
                assert torch.equal(got, triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=same))
            # a chain in a graph: each launch's x is the previous launch's output (its first K
            # columns, read in place), so a launch that did not wait would read a stale x
            chain_in = x.clone()
            if n < k:
                continue
            weight = (packed, scales, row_scale, bias)
            eager = _chain(late, chain_in, weight)
            graph = torch.cuda.CUDAGraph()
            static_in = chain_in.clone()
            _chain(early, static_in, weight)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                static_out = _chain(early, static_in, weight)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_out, eager)
