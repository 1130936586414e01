"""tools/gpu/nvfp4_early.py's GEMV (every weight load before its wait), under Triton's
interpreter and launched without PDL (the interpreter has no grid dependencies): ragged M, N not
a multiple of ``block_n``, K in 1..5 steps, both paths, bias or not, against the CPU reference
and bit for bit against ``triton_gemv``'s unsplit kernel of the same tiling (the same
``accumulate`` steps in the same order); a K no steps make is refused with the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

GPU_TOOLS = Path(__file__).resolve().parents[2] / "tools" / "gpu"
NVFP4_TESTS = Path(__file__).resolve().parents[2] / "plugins" / "quant_nvfp4" / "tests"
sys.path[:0] = [str(GPU_TOOLS), str(NVFP4_TESTS)]
from nvfp4_interpreter import load_interpreted, patch_interpreter  # noqa: E402
from test_triton_gemm import problem  # noqa: E402

from hinge.testing.triton_interpreter import load_interpreted as load_path  # noqa: E402
from hinge_nvfp4 import reference  # noqa: E402


@pytest.fixture
def kernels(monkeypatch):
    patch_interpreter(monkeypatch)
    return load_path(GPU_TOOLS / "nvfp4_early.py", "_interpreted_nvfp4_early"), load_interpreted("triton_gemv")


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("tiling", [(16, 64, 1, False), (32, 64, 3, False), (16, 32, 5, True),
                                    (32, 128, 2, True)])
def test_early_gemv_equals_the_reference_and_the_unsplit_gemv_bit_for_bit(kernels, m, tiling):
    early, gemv = kernels
    block_n, block_k, steps, dot = tiling
    k = block_k * steps
    bias = problem(m, 40, k, seed=m + k)[4] if m % 2 else None
    x, packed, scales, row_scale, _ = problem(m, 40, k, seed=m + k)
    config = early.EarlyConfig(block_n=block_n, block_k=block_k, dot=dot, early=False)
    got = early.nvfp4_gemv_early(x, packed, scales, row_scale, bias, config=config)
    expected = reference.linear(x, packed, scales, row_scale, bias)
    assert got.shape == (m, 40) and got.dtype == torch.float32
    err = float((got.double() - expected.double()).abs().max())
    assert err <= 1e-5 * max(1.0, float(expected.abs().max())), err
    same = gemv.GemvConfig(block_n=block_n, block_k=block_k, split_k=1, dot=dot)
    assert torch.equal(got, gemv.nvfp4_gemv(x, packed, scales, row_scale, bias, config=same))


@pytest.mark.parametrize("k, block_k", [(208, 64), (131072, 1024), (4096, 96), (64, 16)])
def test_a_k_no_steps_make_is_refused_with_the_fix(k, block_k):
    import nvfp4_early

    with pytest.raises(ValueError, match=f"block_k = {block_k} does not split K = {k}.*power of two"):
        nvfp4_early.steps_for(k, nvfp4_early.EarlyConfig(block_k=block_k))


def test_k_in_one_to_sixty_four_power_of_two_steps_is_taken():
    import nvfp4_early

    config = nvfp4_early.EarlyConfig(block_k=1024)
    assert [nvfp4_early.steps_for(k, config) for k in (1024, 3072, 12288, 65536)] == [1, 3, 12, 64]
