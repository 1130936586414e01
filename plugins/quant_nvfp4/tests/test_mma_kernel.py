"""``kernel = "mma"`` (``hinge_nvfp4.kernels.MmaKernel``): decode GEMVs of at most 8 bf16 rows go
to the tensor-core kernel with the weight's fragment words, its scales, the row scale and the
bias; anything else goes to the Triton path; the option is refused where it cannot run. CPU:
the launcher is stood in for by the kernel's emulation (``mma_gemv.emulate``); on a GPU (``gpu``
marker) the real kernel against the reference, eager and captured in a CUDA graph."""

from __future__ import annotations

import pytest
import torch
from test_triton_gemm import problem

from hinge_nvfp4 import mma_gemv, reference
from hinge_nvfp4.kernels import MmaKernel, TritonKernel, select_kernel
from hinge_nvfp4.options import NVFP4Options


class EmulatedLauncher:
    """``MmaGemv``'s fused call, computed by the kernel's emulation; records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, words, scales, x, out, groups_per_split, *, row_scale, bias):
        self.calls.append((words, scales, x.shape, groups_per_split))
        assert scales.dtype == torch.uint8 and out.dtype == torch.bfloat16 and groups_per_split == x.shape[1] // 16
        y = mma_gemv.emulate(words, scales, x) * row_scale.double()
        if bias is not None:
            y = y + bias.double()
        out.copy_(y.to(torch.bfloat16))
        return out


def layer_of(n, k, seed=0):
    x, packed, scales, row_scale, bias = problem(8, n, k, dtype=torch.bfloat16, seed=seed)
    layer = torch.nn.Module()
    layer.row_scale = row_scale
    return layer, x, packed, scales, bias


def test_decode_rows_take_the_tensor_core_kernel_with_the_layers_fragment_words():
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher)
    layer, x, packed, scales, bias = layer_of(48, 128)
    kernel.prepare_linear(layer, packed, scales)
    assert torch.equal(layer.nvfp4_mma_words, mma_gemv.repack_codes(packed))
    for rows, b in ((1, None), (3, bias), (8, bias)):
        got = kernel.linear(layer, x[:rows].contiguous(), b, None)
        want = reference.linear(x[:rows], packed, scales, layer.row_scale, b)
        assert got.shape == (rows, 48) and got.dtype == torch.bfloat16
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    assert len(launcher.calls) == 3


def test_everything_else_takes_the_triton_path(monkeypatch):
    triton_calls = []
    monkeypatch.setattr(TritonKernel, "linear", lambda self, layer, x, bias, act: triton_calls.append(
        (tuple(x.shape), x.dtype, act is not None)) or "triton")
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher)
    layer, x, packed, scales, bias = layer_of(48, 128)
    kernel.prepare_linear(layer, packed, scales)
    nine = torch.cat([x, x[:1]])
    assert kernel.linear(layer, nine, None, None) == "triton"  # more than 8 rows
    assert kernel.linear(layer, x.float(), None, None) == "triton"  # not bf16
    assert kernel.linear(layer, x[:2], None, torch.tensor(1.0)) == "triton"  # w4a4 activations
    assert kernel.linear(layer, x.t().contiguous().t(), None, None) == "triton"  # strided rows
    odd, x2, packed2, scales2, _ = layer_of(24, 96)  # N % 16 and K % 64 both off
    kernel.prepare_linear(odd, packed2, scales2)
    assert odd.nvfp4_mma_words is None
    assert kernel.linear(odd, x2[:1].contiguous(), None, None) == "triton"
    assert len(triton_calls) == 5 and not launcher.calls


def test_the_option_is_refused_where_it_cannot_run_naming_the_alternative():
    with pytest.raises(ValueError, match="runs on CUDA only"):
        select_kernel(NVFP4Options(kernel="mma"), "cpu", False)
    with pytest.raises(ValueError, match="default mode.*kernel=triton"):
        select_kernel(NVFP4Options(kernel="mma"), "cuda", True)
    with pytest.raises(ValueError, match="W4A16"):
        select_kernel(NVFP4Options(kernel="mma", activations="w4a4"), "cuda", False)


def test_the_repack_in_row_blocks_equals_the_repack_at_once():
    _, _, packed, _, _ = layer_of(80, 128, seed=3)
    assert torch.equal(mma_gemv.repack_codes(packed, rows_at_once=32), mma_gemv.repack_codes(packed))


def test_the_cubin_is_built_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    builds = []
    monkeypatch.setattr(mma_gemv, "build_cubin", lambda arch, stages: builds.append((arch, stages)) or b"cubin")
    assert mma_gemv.cached_cubin("sm_90", 8, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 8, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path) == b"cubin"
    assert builds == [("sm_90", 8), ("sm_90", 4)]
    assert len(list(tmp_path.glob("mma_gemv-sm_90-*.cubin"))) == 2 and not list(tmp_path.glob("*.tmp"))


QWEN3_8B = [(6144, 4096), (24576, 4096), (4096, 12288), (4096, 4096)]


@pytest.mark.gpu
def test_cuda_mma_gemv_equals_the_reference_on_qwen3_8b_shapes_eager_and_in_a_graph():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    kernel = select_kernel(NVFP4Options(kernel="mma"), "cuda", False)
    for n, k in QWEN3_8B:
        x, packed, scales, row_scale, bias = problem(8, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        layer = torch.nn.Module()
        layer.row_scale = row_scale
        kernel.prepare_linear(layer, packed, scales)
        for rows in (1, 2, 5, 8):
            xr = x[:rows].contiguous()
            got = kernel.linear(layer, xr, bias, None)
            want = reference.linear(xr, packed, scales, row_scale, bias)
            err = (got.float() - want.float()).abs().max() / want.float().abs().max()
            assert err < 1e-2, (n, k, rows, float(err))
        graph = torch.cuda.CUDAGraph()
        static = x[:1].contiguous()
        eager = kernel.linear(layer, static, bias, None)
        with torch.cuda.graph(graph):
            captured = kernel.linear(layer, static, bias, None)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, eager), (n, k)
