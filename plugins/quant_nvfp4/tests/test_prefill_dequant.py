"""Prefill-size linears through a dequantized weight (``triton_gemm.nvfp4_linear_dequantized``,
``NVFP4Options.prefill_dequant_rows``): the weight pass against the reference dequantization
(bit for bit, under Triton's interpreter on CPU), the linear within one bf16 rounding of the
reference, the kernel objects' routing by rows and their one shared buffer; marked gpu, on CUDA
at Qwen3-8B shapes and in a CUDA graph."""

from __future__ import annotations

import pytest
import torch
from nvfp4_interpreter import load_interpreted, patch_interpreter
from test_mma_kernel import layer_of
from test_triton_gemm import QWEN3_8B, problem

from hinge_nvfp4 import reference
from hinge_nvfp4.kernels import MmaKernel, TritonKernel, select_kernel
from hinge_nvfp4.options import NVFP4Options


@pytest.fixture
def gemm(monkeypatch):
    patch_interpreter(monkeypatch)
    return load_interpreted("triton_gemm")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_interpreted_dequantized_weight_is_the_reference_dequantization_times_the_row_scale_rounded_once(
        gemm, dtype):
    # 48 rows (a partial 32-row block), 96 columns (a partial 128-column block), a zero block
    # (the interpreter's float32 -> 16-bit cast truncates where the GPU rounds to nearest even:
    # each value is one of the two; the GPU test below asks for the rounded one)
    _, packed, scales, row_scale, _ = problem(1, 48, 96, seed=4)
    out = torch.full((48, 96), float("nan"), dtype=dtype)
    gemm.dequantize_weight(packed, scales, row_scale, out)
    exact = reference.dequantize_unscaled(packed, scales) * row_scale[:, None]
    assert torch.equal(out, exact.to(dtype)) or torch.all((out == exact.to(dtype)) | (out == truncated(exact, dtype)))
    assert not torch.equal(out, torch.zeros_like(out))


def truncated(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 ``values`` cast to ``dtype`` rounding toward zero."""
    down = values.to(dtype)
    over = down.float().abs() > values.abs()
    return torch.where(over, torch.nextafter(down, torch.zeros_like(down)), down)


def test_interpreted_dequantized_linear_is_within_one_bf16_rounding_of_the_reference(gemm):
    x, packed, scales, row_scale, bias = problem(40, 48, 96, dtype=torch.bfloat16, seed=5)
    buffer = torch.empty(2 * 48 * 96 + 10, dtype=torch.uint8)  # larger than needed: a prefix is used
    for b in (bias, None):
        got = gemm.nvfp4_linear_dequantized(x, packed, scales, row_scale, b, buffer)
        want = reference.linear(x, packed, scales, row_scale, b)
        assert got.dtype == torch.bfloat16 and got.shape == (40, 48)
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()


def test_a_buffer_too_small_a_float32_x_or_a_wrong_output_are_refused_naming_what_is_needed(gemm):
    x, packed, scales, row_scale, _ = problem(4, 48, 96, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=f"buffer of >= {2 * 48 * 96} bytes"):
        gemm.nvfp4_linear_dequantized(x, packed, scales, row_scale, None, torch.empty(100, dtype=torch.uint8))
    with pytest.raises(ValueError, match="bf16/fp16 x"):
        gemm.nvfp4_linear_dequantized(x.float(), packed, scales, row_scale, None,
                                      torch.empty(2 * 48 * 96, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"contiguous \(48, 96\) bf16 or fp16"):
        gemm.dequantize_weight(packed, scales, row_scale, torch.empty(48, 96))


@pytest.mark.parametrize("cls", [TritonKernel, MmaKernel])
def test_rows_from_the_option_take_the_dequantized_weight_and_fewer_rows_deterministic_or_w4a4_do_not(
        cls, monkeypatch):
    import hinge_nvfp4.triton_gemm as triton_gemm

    calls = []
    monkeypatch.setattr(triton_gemm, "nvfp4_linear_dequantized",
                        lambda x, *args: calls.append(("dequantized", x.shape[0], args[-1].numel())) or "deq")
    monkeypatch.setattr(triton_gemm, "nvfp4_linear",
                        lambda x, *args, **kw: calls.append(("fused", x.shape[0])) or "fused")
    kernel = (TritonKernel(False, dequant_rows=32) if cls is TritonKernel
              else MmaKernel(gemv=lambda *a, **k: None, num_sms=132, dequant_rows=32))
    small, big = ((layer, packed, scales) for layer, _, packed, scales, _ in (layer_of(48, 96, rows=1),
                                                                              layer_of(64, 160, rows=1)))
    for layer, packed, scales in (small, big, small):  # the buffer grows to the largest weight
        kernel.prepare_linear(layer, packed, scales)
    x = torch.randn(40, 96, dtype=torch.bfloat16)
    kernel.linear(small[0], x, None, None)  # 40 rows >= 32
    kernel.linear(small[0], x[:31].contiguous().float(), None, None)  # float32: fused
    kernel.linear(small[0], x[:17].contiguous(), None, None)  # fewer rows: fused (MMA takes <= 16)
    kernel.linear(small[0], x, None, torch.tensor(1.0))  # w4a4 activations: fused
    assert calls == [("dequantized", 40, 2 * 64 * 160), ("fused", 31), ("fused", 17), ("fused", 40)]
    deterministic = TritonKernel(True, dequant_rows=32)
    deterministic.prepare_linear(*small)
    assert deterministic.dequant_rows == 0 and deterministic._buffer is None
    off = TritonKernel(False)
    off.prepare_linear(*small)
    assert off._buffer is None  # no memory taken unless asked


def test_the_option_reaches_the_kernels_and_a_negative_count_is_refused():
    assert select_kernel(NVFP4Options(kernel="triton", prefill_dequant_rows=128), "cuda", False).dequant_rows == 128
    assert select_kernel(NVFP4Options(kernel="triton", prefill_dequant_rows=128), "cuda", True).dequant_rows == 0
    assert select_kernel(NVFP4Options(kernel="triton"), "cuda", False).dequant_rows == 64  # the default
    assert select_kernel(NVFP4Options(kernel="triton", prefill_dequant_rows=0), "cuda", False).dequant_rows == 0
    with pytest.raises(ValueError, match="prefill_dequant_rows"):
        NVFP4Options(prefill_dequant_rows=-1)


# -- on the GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_dequantized_weight_is_the_reference_dequantization_rounded_to_nearest_even():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4.triton_gemm import dequantize_weight

    _, packed, scales, row_scale, _ = problem(1, 6144, 4096, seed=2, device="cuda")
    out = torch.empty(6144, 4096, dtype=torch.bfloat16, device="cuda")
    dequantize_weight(packed, scales, row_scale, out)
    assert torch.equal(out, (reference.dequantize_unscaled(packed, scales) * row_scale[:, None]).to(torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [64, 250])
def test_cuda_dequantized_linear_equals_the_reference_on_qwen3_8b_shapes_eager_and_in_a_graph(m):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from functools import partial

    from nvfp4_helpers import replay_matches_eager

    kernel = TritonKernel(False, dequant_rows=64)
    for n, k in QWEN3_8B:
        x, packed, scales, row_scale, bias = problem(m, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        layer = torch.nn.Module()
        layer.row_scale = row_scale
        kernel.prepare_linear(layer, packed, scales)
        got = kernel.linear(layer, x, bias, None)
        want = reference.linear(x, packed, scales, row_scale, bias)
        err = float((got.float() - want.float()).abs().max())
        assert err <= 2e-2 * max(1.0, float(want.abs().max())), (n, k, m, err)
        assert replay_matches_eager(partial(kernel.linear, layer, x, bias, None), x), (n, k, m)
