"""``kernel = "mma"`` (``hinge_nvfp4.kernels.MmaKernel``): decode GEMVs of at most 8 bf16 rows go
to the tensor-core kernel with the weight's fragment words, its scales, the row scale and the
bias; anything else goes to the Triton path; the option is refused where it cannot run. CPU:
the launcher is stood in for by the kernel's emulation (``mma_layout.emulate``); on a GPU (``gpu``
marker) the real kernel against the reference, eager and captured in a CUDA graph."""

from __future__ import annotations

import pytest
import torch
from test_triton_gemm import problem

from hinge_nvfp4 import mma_gemv, mma_layout, reference
from hinge_nvfp4.kernels import MmaKernel, TritonKernel, select_kernel
from hinge_nvfp4.options import NVFP4Options

QWEN3_8B = [(6144, 4096), (24576, 4096), (4096, 12288), (4096, 4096)]


class EmulatedLauncher:
    """``MmaGemv``'s fused call, computed by the kernel's emulation split by split (each split's
    sums, added in split order, as the kernel's last warp does); records its arguments."""

    def __init__(self):
        self.calls, self.reserved = [], []

    def reserve_counters(self, tiles, device):
        self.reserved.append(tiles)

    def __call__(self, words, scale_codes, x, part, groups_per_split, *, row_scale, bias, out):
        groups = x.shape[1] // 16
        splits = -(-groups // groups_per_split)
        self.calls.append((tuple(x.shape), splits, groups_per_split))
        assert scale_codes.dtype == torch.int32 and out.dtype == torch.bfloat16 and groups_per_split % 8 == 0
        assert (part is None) == (splits == 1) and (part is None or part.shape == (splits, *out.shape))
        total = torch.zeros(out.shape, dtype=torch.float64)
        for s in range(splits):
            j0, j1 = s * groups_per_split, min((s + 1) * groups_per_split, groups)
            total += mma_layout.emulate(words[:, j0 // 8:j1 // 8], scale_codes[:, j0 // 8:j1 // 8],
                                      x[:, 16 * j0:16 * j1])
        y = total * row_scale.double()
        if bias is not None:
            y = y + bias.double()
        out.copy_(y.to(torch.bfloat16))
        return out


def layer_of(n, k, seed=0):
    x, packed, scales, row_scale, bias = problem(8, n, k, dtype=torch.bfloat16, seed=seed)
    layer = torch.nn.Module()
    layer.row_scale = row_scale
    return layer, x, packed, scales, bias


@pytest.mark.parametrize("num_sms, splits", [(132, 4), (1, 1)])
def test_decode_rows_take_the_tensor_core_kernel_with_the_layers_fragment_words(num_sms, splits):
    # 128 x 2048: 8 tiles; on 132 SMs split_plan splits K in 4 (counters reserved), on 1 it does not
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=num_sms)
    layer, x, packed, scales, bias = layer_of(128, 2048)
    kernel.prepare_linear(layer, packed, scales)
    words, codes = mma_layout.repack(packed, scales)
    assert torch.equal(layer.nvfp4_mma_words, words) and torch.equal(layer.nvfp4_mma_scales, codes)
    assert layer.nvfp4_mma_split[0] == splits and launcher.reserved == ([8] if splits > 1 else [])
    assert layer.nvfp4_mma_stages == mma_gemv.ring_stages(layer.nvfp4_mma_split[1])
    for rows, b in ((1, None), (3, bias), (8, bias)):
        got = kernel.linear(layer, x[:rows].contiguous(), b, None)
        want = reference.linear(x[:rows], packed, scales, layer.row_scale, b)
        assert got.shape == (rows, 128) and got.dtype == torch.bfloat16
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    assert [c[1] for c in launcher.calls] == [splits] * 3


def test_the_superstep_major_layout_computes_the_same_and_a_wrong_layout_is_refused(monkeypatch):
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=132, layout="super")
    layer, x, packed, scales, bias = layer_of(128, 2048)
    kernel.prepare_linear(layer, packed, scales)
    assert mma_layout.block_strides(layer.nvfp4_mma_words, layer.nvfp4_mma_scales) == (1, 8)
    got = kernel.linear(layer, x[:2].contiguous(), bias, None)
    want = reference.linear(x[:2], packed, scales, layer.row_scale, bias)
    assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    monkeypatch.setenv("HINGE_NVFP4_MMA_LAYOUT", "rows")
    with pytest.raises(ValueError, match="layout 'rows'.*tile and super"):
        MmaKernel(gemv=launcher, num_sms=132)
    with pytest.raises(ValueError, match="form 'early'.*plain, ahead"):
        MmaKernel(gemv=launcher, num_sms=132, layout="tile", form="early")


def test_the_split_plan_fills_the_gpu_with_whole_steps():
    plans = {(n, k): mma_gemv.split_plan(n, k, 132) for n, k in QWEN3_8B}
    assert plans == {(6144, 4096): (4, 64), (24576, 4096): (1, 256), (4096, 12288): (8, 96),
                     (4096, 4096): (8, 32)}
    for (_, k), (splits, per_split) in plans.items():
        assert per_split % 8 == 0 and -(-(k // 16) // per_split) == splits
    assert mma_gemv.split_plan(48, 256, 132) == (1, 16)  # too few supersteps to split
    # the probe's fastest ring depths (module docstring): 8 for gate_up's one long split
    assert [mma_gemv.ring_stages(plans[shape][1]) for shape in QWEN3_8B] == [4, 8, 4, 4]


def test_everything_else_takes_the_triton_path(monkeypatch):
    triton_calls = []
    monkeypatch.setattr(TritonKernel, "linear", lambda self, layer, x, bias, act: triton_calls.append(
        (tuple(x.shape), x.dtype, act is not None)) or "triton")
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=132)
    layer, x, packed, scales, bias = layer_of(48, 128)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_words is not None
    nine = torch.cat([x, x[:1]])
    assert kernel.linear(layer, nine, None, None) == "triton"  # more than 8 rows
    assert kernel.linear(layer, x.float(), None, None) == "triton"  # not bf16
    assert kernel.linear(layer, x[:2], None, torch.tensor(1.0)) == "triton"  # w4a4 activations
    assert kernel.linear(layer, x.t().contiguous().t(), None, None) == "triton"  # strided rows
    assert kernel.linear(layer, x.view(-1)[1:129].view(1, 128), None, None) == "triton"  # unaligned
    odd, x2, packed2, scales2, _ = layer_of(24, 96)  # N % 16 and K % 128 both off
    kernel.prepare_linear(odd, packed2, scales2)
    assert odd.nvfp4_mma_words is None
    assert kernel.linear(odd, x2[:1].contiguous(), None, None) == "triton"
    assert len(triton_calls) == 6 and not launcher.calls


def test_the_option_is_refused_where_it_cannot_run_naming_the_alternative():
    with pytest.raises(ValueError, match="runs on CUDA only"):
        select_kernel(NVFP4Options(kernel="mma"), "cpu", False)
    with pytest.raises(ValueError, match="default mode.*kernel=triton"):
        select_kernel(NVFP4Options(kernel="mma"), "cuda", True)
    with pytest.raises(ValueError, match="W4A16"):
        select_kernel(NVFP4Options(kernel="mma", activations="w4a4"), "cuda", False)


def test_the_repack_in_row_blocks_equals_the_repack_at_once():
    _, _, packed, _, _ = layer_of(80, 128, seed=3)
    assert torch.equal(mma_layout.repack_codes(packed, rows_at_once=32), mma_layout.repack_codes(packed))


def test_the_cubin_is_built_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    builds = []
    monkeypatch.setattr(mma_gemv, "build_cubin", lambda arch, stages: builds.append((arch, stages)) or b"cubin")
    assert mma_gemv.cached_cubin("sm_90", 8, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 8, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path) == b"cubin"
    assert builds == [("sm_90", 8), ("sm_90", 4)]
    assert len(list(tmp_path.glob("mma_gemv-sm_90-*.cubin"))) == 2 and not list(tmp_path.glob("*.tmp"))


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


def test_a_failed_nvcc_build_says_what_nvcc_said_and_what_to_use_instead(monkeypatch, tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'error: no such arch sm_01' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(RuntimeError, match=r"(?s)exit 3:.*no such arch sm_01.*kernel=triton"):
        mma_gemv.build_cubin("sm_01")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="nvcc is not on PATH.*kernel=triton"):
        mma_gemv.build_cubin("sm_90")
