"""The experimental W-as-A decode GEMV (``hinge_nvfp4.triton_gemv_wa``, ``GemvConfig(dot="wa")``)
under Triton's interpreter against the CPU reference: ragged rows, N and K, split-K, every code
byte and finite scale decoded exactly, activations far beyond fp16's range prescaled, and its
tiling rules. Its speed is the H200 sweep's (``tools/gpu/nvfp4_gemm.py --sweep``)."""

from __future__ import annotations

import pytest
import torch
from nvfp4_interpreter import load_interpreted, patch_interpreter
from test_triton_gemm import problem
from test_triton_gemv import ROWS, assert_matches

from hinge_nvfp4 import reference
from hinge_nvfp4.triton_gemv import GemvConfig

#: (block_n, block_k, split_k): K = 208 leaves a ragged last block, N = 40 a ragged last tile
TILINGS = [(64, 128, 1), (64, 128, 3), (128, 256, 1)]


@pytest.fixture
def wa(monkeypatch):
    """The interpreted module, its split-K reduction from the interpreted ``triton_gemv``."""
    patch_interpreter(monkeypatch)
    module = load_interpreted("triton_gemv_wa")
    monkeypatch.setattr(module, "triton_gemv", load_interpreted("triton_gemv"))
    return module


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("tiling", TILINGS)
def test_interpreted_wa_gemv_equals_the_reference_for_ragged_rows_in_every_tiling(wa, m, tiling):
    n_, k_, split = tiling
    x, packed, scales, row_scale, bias = problem(m, 40, 208, seed=m)
    config = GemvConfig(block_n=n_, block_k=k_, split_k=split, dot="wa")
    got = wa.nvfp4_gemv_wa(x, packed, scales, row_scale, bias if m % 2 else None, config=config)
    expected = reference.linear(x, packed, scales, row_scale, bias if m % 2 else None)
    assert got.shape == (m, 40) and got.dtype == torch.float32
    assert_matches(got, expected, 2e-3)  # float32 x rounded to fp16 (11 significant bits)


def test_interpreted_wa_gemv_in_bfloat16_matches_within_one_rounding(wa):
    x, packed, scales, row_scale, bias = problem(5, 72, 256, dtype=torch.bfloat16, seed=5)
    got = wa.nvfp4_gemv_wa(x, packed, scales, row_scale, bias,
                           config=GemvConfig(block_n=64, block_k=128, split_k=2, dot="wa"))
    assert got.dtype == torch.bfloat16
    assert_matches(got.float(), reference.linear(x, packed, scales, row_scale, bias).float(), 1.6e-2)


def test_interpreted_wa_gemv_decodes_every_code_byte_and_every_finite_scale_exactly(wa):
    """As for the CUDA-core GEMV: one-hot rows of x, so each output is one code times its scale,
    exact in fp16 (the operands) and float32 (the sum)."""
    n, k = 127, 512
    byte = (torch.arange(n)[:, None] * 7 + torch.arange(k // 2)[None, :]) % 256
    scales = ((torch.arange(n)[:, None] + torch.arange(k // 16)[None, :]) % 127).to(torch.uint8)
    x = torch.eye(k)[::9][:16].contiguous()
    args = (x, byte.to(torch.uint8), scales.view(torch.float8_e4m3fn), torch.ones(n), None)
    got = wa.nvfp4_gemv_wa(*args, config=GemvConfig(block_n=64, block_k=128, split_k=2, dot="wa"))
    assert torch.equal(got, reference.linear(*args))


def test_activations_beyond_the_fp16_range_are_prescaled_not_overflowed(wa):
    x, packed, scales, row_scale, _ = problem(3, 64, 256, seed=9)
    x[0] *= 1e6  # row 0 far past 65504, row 2 tiny
    x[2] *= 1e-3
    got = wa.nvfp4_gemv_wa(x, packed, scales, row_scale, None,
                           config=GemvConfig(block_n=64, block_k=128, dot="wa"))
    expected = reference.linear(x, packed, scales, row_scale, None)
    assert torch.isfinite(got).all()
    for r in range(3):
        assert_matches(got[r] / expected[r].abs().max(), expected[r] / expected[r].abs().max(), 2e-3)


def test_a_wa_tiling_the_mma_cannot_take_is_refused_naming_the_rule(wa):
    x, packed, scales, row_scale, _ = problem(2, 64, 256)
    for bad in (GemvConfig(block_n=64, block_k=64, dot="wa"), GemvConfig(block_n=32, block_k=128, dot="wa")):
        with pytest.raises(ValueError, match="block_k a power of two >= 128 and block_n a multiple of 64"):
            wa.nvfp4_gemv_wa(x, packed, scales, row_scale, None, config=bad)
    with pytest.raises(ValueError, match="at most 16 rows"):
        wa.nvfp4_gemv_wa(torch.randn(17, 256), packed, scales, row_scale, None,
                         config=GemvConfig(block_n=64, block_k=128, dot="wa"))


def test_nvfp4_gemv_hands_a_wa_config_to_the_wa_kernel(monkeypatch):
    import hinge_nvfp4.triton_gemv_wa as real_wa
    from hinge_nvfp4 import triton_gemv

    seen = []
    monkeypatch.setattr(real_wa, "nvfp4_gemv_wa", lambda *a, **kw: seen.append(kw["config"]) or "wa")
    x, packed, scales, row_scale, _ = problem(1, 64, 256)
    config = GemvConfig(block_n=64, block_k=128, dot="wa")
    assert triton_gemv.nvfp4_gemv(x, packed, scales, row_scale, None, config=config) == "wa"
    assert seen == [config]


@pytest.mark.parametrize("block_n, block_k, warps", [(64, 128, 4), (128, 256, 8)])
def test_the_wa_kernel_compiles_for_the_h200_onto_the_tensor_cores(block_n, block_k, warps):
    """sm_90 with Triton's own ptxas (no GPU needed): the decoded weights feed ``wgmma``."""
    pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from hinge_nvfp4.triton_gemv_wa import ROWS, _nvfp4_gemv_wa_kernel

    sig = dict(x16_ptr="*fp16", exp_ptr="*i32", w_ptr="*i32", s_ptr="*u8", rs_ptr="*fp32",
               bias_ptr="*fp32", out_ptr="*bf16", M="i32", N="i32", K="i32", stride_x16="i32",
               stride_wn="i32", stride_sn="i32", stride_os="i32", stride_om="i32", k_per_split="i32")
    consts = dict(HAS_BIAS=False, EPILOGUE=True, EVEN_K=True, BLOCK_N=block_n, BLOCK_K=block_k,
                  BLOCK_M=ROWS)
    names = _nvfp4_gemv_wa_kernel.arg_names
    aligned = [n for n in sig if n not in ("M", "stride_os")]  # Qwen3-8B: the rest are multiples of 16
    src = ASTSource(fn=_nvfp4_gemv_wa_kernel, signature={**sig, **dict.fromkeys(consts, "constexpr")},
                    constexprs=consts, attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": warps, "num_stages": 3}).asm["ptx"]
    assert "wgmma.mma_async" in ptx and ".f16" in ptx
