"""``kernel = "mma"`` (``hinge_nvfp4.kernels.MmaKernel``): decode GEMVs of at most 16 bf16 rows go
to the tensor-core kernel with the weight's fragment words, its scales, the row scale and the
bias; anything else goes to the Triton path; the option is refused where it cannot run. CPU:
the launcher is stood in for by the kernel's emulation (``mma_layout.emulate``); on a GPU (``gpu``
marker) the real kernel against the reference, eager and captured in a CUDA graph."""

from __future__ import annotations

import functools
import json

import pytest
import torch
from test_triton_gemm import problem

from hinge_nvfp4 import mma_gemv, mma_layout, mma_tiling, reference
from hinge_nvfp4.kernels import MmaKernel, TritonKernel, select_kernel
from hinge_nvfp4.options import NVFP4Options

QWEN3_8B = [(6144, 4096), (24576, 4096), (4096, 12288), (4096, 4096)]


class EmulatedLauncher:
    """``MmaGemv``'s fused call, computed by the kernel's emulation split by split (each split's
    sums, added in split order, as the kernel's last warp does) in column map ``columns``;
    records its arguments."""

    def __init__(self, columns=mma_layout.COLUMNS):
        self.calls, self.reserved, self.early, self.columns = [], [], [], columns

    def reserve_counters(self, tiles, device):
        self.reserved.append(tiles)

    def dequantize(self, words, scale_codes, row_scale, out, pair_tiles=0):
        self.calls.append(("dequantize", tuple(out.shape), pair_tiles))
        return out.copy_(mma_layout.dequantize(words, scale_codes, row_scale, pair_tiles, self.columns))

    def __call__(self, words, scale_codes, x, part, groups_per_split, *, row_scale, bias, out,
                 pair_tiles=0, gated=False, early=True):
        groups, n = x.shape[1] // 16, words.shape[0] * 16
        splits = -(-groups // groups_per_split)
        self.calls.append((tuple(x.shape), splits, groups_per_split, pair_tiles, gated))
        self.early.append(early)
        assert scale_codes.dtype == torch.int32 and out.dtype == torch.bfloat16 and groups_per_split % 8 == 0
        assert (part is None) == (splits == 1 and not gated)
        assert part is None or part.shape == (splits, x.shape[0], n)
        total = torch.zeros(x.shape[0], n, dtype=torch.float64)
        for s in range(splits):
            j0, j1 = s * groups_per_split, min((s + 1) * groups_per_split, groups)
            total += mma_layout.emulate(words[:, j0 // 8:j1 // 8], scale_codes[:, j0 // 8:j1 // 8],
                                      x[:, 16 * j0:16 * j1], self.columns)
        y = total * row_scale.double()
        if bias is not None:
            y = y + bias.double()
        y = y.to(torch.bfloat16)
        if pair_tiles:  # kernel rows in pairs of tiles: [gate | up] order again
            y = y[:, torch.argsort(mma_layout.pair_rows(n))]
        if gated:
            gate, up = y.float().chunk(2, dim=-1)
            y = (gate / (1.0 + torch.exp(-gate)) * up).to(torch.bfloat16)
        out.copy_(y)
        return out


def layer_of(n, k, seed=0, rows=16, device="cpu"):
    x, packed, scales, row_scale, bias = problem(rows, n, k, dtype=torch.bfloat16, seed=seed, device=device)
    layer = torch.nn.Module()
    layer.row_scale = row_scale
    return layer, x, packed, scales, bias


def assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, row_counts):
    """``kernel.linear`` over x's first rows, each count of ``row_counts``, within 1% (of the
    largest output) of the reference."""
    for rows in row_counts:
        xr = x[:rows].contiguous()
        got = kernel.linear(layer, xr, bias, None)
        want = reference.linear(xr, packed, scales, layer.row_scale, bias)
        err = (got.float() - want.float()).abs().max() / want.float().abs().max()
        assert err < 1e-2, (packed.shape, rows, float(err))


@pytest.mark.parametrize("num_sms, splits", [(132, 4), (1, 2)])
def test_decode_rows_take_the_tensor_core_kernel_with_the_layers_fragment_words(num_sms, splits):
    # 128 x 8192: 8 tiles of 64 supersteps; on 132 SMs 4 warps a tile and K in 4 splits, on 1 SM
    # one warp a tile (8 warps are enough there) and 2 splits (runs of 64 are long); counters
    # reserved
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=num_sms)
    layer, x, packed, scales, bias = layer_of(128, 8192)
    kernel.prepare_linear(layer, packed, scales)
    words, codes = mma_layout.repack(packed, scales)
    assert torch.equal(layer.nvfp4_mma_words, words) and torch.equal(layer.nvfp4_mma_scales, codes)
    assert layer.nvfp4_mma_tiling.splits == splits and launcher.reserved == ([8] if splits > 1 else [])
    assert layer.nvfp4_mma_tiling == mma_tiling.tiling(128, 8192, num_sms)
    assert layer.nvfp4_mma_tiling.kwarps == (4 if num_sms == 132 else 1)
    for rows, b in ((1, None), (3, bias), (8, bias), (9, None), (16, bias)):
        got = kernel.linear(layer, x[:rows].contiguous(), b, None)
        want = reference.linear(x[:rows], packed, scales, layer.row_scale, b)
        assert got.shape == (rows, 128) and got.dtype == torch.bfloat16
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    assert [c[1] for c in launcher.calls] == [splits] * 5
    assert layer.nvfp4_mma_pairs == 0  # not a fused [gate | up]


def gate_up_layer(half, k, seed=0):
    layer, x, packed, scales, _ = layer_of(2 * half, k, seed=seed)
    layer.spec = type("Spec", (), {"output_sizes_per_partition": (half, half)})()
    layer.plain_parts, layer.bias = (), None
    return layer, x, packed, scales


@pytest.mark.parametrize("num_sms", [132, 1])
def test_a_gate_up_layer_is_paired_its_output_keeps_its_order_and_its_gated_output_is_silu_mul(num_sms):
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=num_sms)
    layer, x, packed, scales = gate_up_layer(96, 1024)
    kernel.prepare_linear(layer, packed, scales)
    order = mma_layout.pair_rows(192)
    assert layer.nvfp4_mma_pairs == 6 and order[:20].tolist() == [*range(16), 96, 97, 98, 99]
    words, codes = mma_layout.repack(packed[order], scales[order])
    assert torch.equal(layer.nvfp4_mma_words, words) and torch.equal(layer.nvfp4_mma_scales, codes)
    assert torch.equal(layer.nvfp4_mma_row_scale, layer.row_scale[order])
    assert launcher.reserved[-1] == 12 + 6  # split counters, then pair counters
    for rows in (1, 5):
        xr = x[:rows].contiguous()
        plain = kernel.linear(layer, xr, None, None)
        want = reference.linear(xr, packed, scales, layer.row_scale, None)
        assert (plain.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
        gated = kernel.gated(layer, xr, "silu")
        gate, up = plain.float().chunk(2, dim=-1)
        assert torch.equal(gated, (gate / (1.0 + torch.exp(-gate)) * up).to(torch.bfloat16))
    assert [c[3:] for c in launcher.calls] == [(6, False), (6, True)] * 2
    assert kernel.gated(layer, x[:1].contiguous(), "gelu") is None  # only silu is fused
    assert kernel.gated(layer, x[:1].repeat(17, 1).contiguous(), "silu") is None  # 17 rows: Triton's


def test_the_mlp_over_the_kernel_runs_the_gated_gemv_then_down_and_equals_the_unfused_formula():
    from nvfp4_helpers import build, nvfp4_mlp

    from hinge_nvfp4.options import NVFP4Options
    from hinge_nvfp4.quantizer import NVFP4Quantizer

    launcher = EmulatedLauncher()
    q = NVFP4Quantizer(NVFP4Options(), build(dtype=torch.bfloat16))
    q.kernel = MmaKernel(gemv=launcher, num_sms=132)
    mlp = nvfp4_mlp(256, 512, device="cpu", quantizer=q)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got = mlp(x)
    assert [c[3:] for c in launcher.calls] == [(32, True), (0, False)]  # gated gate_up, then down
    gate, up = mlp.gate_up_proj(x).float().chunk(2, dim=-1)
    assert torch.equal(got, mlp.down_proj((gate / (1.0 + torch.exp(-gate)) * up).to(torch.bfloat16)))


def test_the_gemv_behind_a_gated_one_launches_after_it_ends_unless_spread_or_told_to_launch_early(monkeypatch):
    # measured on the H200 (tools/gpu/gated_mlp.py): down launched early behind the gated GEMV
    # costs more than it saves; every other launch may start early; the per-layer flag wins.
    # With launches spread over the multiprocessors (H100) early behind it by default
    from nvfp4_helpers import build, nvfp4_mlp

    from hinge_nvfp4.options import NVFP4Options
    from hinge_nvfp4.quantizer import NVFP4Quantizer

    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    after_gated = [True, False, True, True, True, False]
    for env, spread, want in ((None, False, after_gated), ("early", False, [True] * 6), (None, True, [True] * 6),
                              ("after", True, after_gated)):
        if env is None:
            monkeypatch.delenv("HINGE_NVFP4_MMA_AFTER_GATED", raising=False)
        else:
            monkeypatch.setenv("HINGE_NVFP4_MMA_AFTER_GATED", env)
        launcher = EmulatedLauncher()
        launcher.spread = spread
        q = NVFP4Quantizer(NVFP4Options(), build(dtype=torch.bfloat16))
        q.kernel = MmaKernel(gemv=launcher, num_sms=132)
        mlp = nvfp4_mlp(256, 512, device="cpu", quantizer=q)
        mlp(x)  # gated gate_up, down
        mlp.gate_up_proj(x)  # plain gate_up: not gated, so what follows may launch early
        mlp.down_proj(x.repeat(1, 2).contiguous())
        mlp(x)
        assert launcher.early == want, (env, spread)
    mlp.down_proj.nvfp4_mma_early = False
    mlp.down_proj(x.repeat(1, 2).contiguous())
    assert launcher.early[-1] is False
    monkeypatch.setenv("HINGE_NVFP4_MMA_AFTER_GATED", "soon")
    with pytest.raises(ValueError, match="HINGE_NVFP4_MMA_AFTER_GATED=soon: early or after"):
        MmaKernel(gemv=launcher, num_sms=132)
    monkeypatch.setenv("HINGE_NVFP4_MMA_AFTER_GATED", "early")
    monkeypatch.setenv("HINGE_NVFP4_MMA_LATE", "mlp.gate_up_proj,nothing")  # by module-name ending
    q.kernel = MmaKernel(gemv=launcher, num_sms=132)
    mlp = nvfp4_mlp(256, 512, device="cpu", quantizer=q)
    mlp(x)
    assert launcher.early[-2:] == [False, True]  # gate_up late; down right behind it early (env)


def test_a_layer_with_a_bias_or_unequal_or_mixed_partitions_is_not_paired():
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    for change in ({"bias": torch.zeros(192)}, {"plain_parts": (1,)},
                   {"spec": type("Spec", (), {"output_sizes_per_partition": (128, 64)})()}):
        layer, _, packed, scales = gate_up_layer(96, 256)
        for name, value in change.items():
            setattr(layer, name, value)
        kernel.prepare_linear(layer, packed, scales)
        assert layer.nvfp4_mma_pairs == 0 and kernel.gated(layer, torch.zeros(1, 256, dtype=torch.bfloat16), "silu") is None
    with pytest.raises(ValueError, match="N = 48 is not a multiple of 32"):
        mma_layout.pair_rows(48)


def test_the_superstep_major_and_interleaved_layouts_compute_the_same_and_a_wrong_layout_is_refused(monkeypatch):
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=132, layout="super")
    layer, x, packed, scales, bias = layer_of(128, 2048)
    kernel.prepare_linear(layer, packed, scales)
    assert mma_layout.block_strides(layer.nvfp4_mma_words, layer.nvfp4_mma_scales) == (64, 8 * 64, 8, 8 * 8)
    got = kernel.linear(layer, x[:2].contiguous(), bias, None)
    want = reference.linear(x[:2], packed, scales, layer.row_scale, bias)
    assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    kernel = MmaKernel(gemv=launcher, num_sms=132, layout="interleaved")
    kernel.prepare_linear(layer, packed, scales)
    assert mma_layout.block_strides(layer.nvfp4_mma_words, layer.nvfp4_mma_scales) == (16 * 72, 72, 16 * 72, 72)
    got = kernel.linear(layer, x[:2].contiguous(), bias, None)
    assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    monkeypatch.setenv("HINGE_NVFP4_MMA_LAYOUT", "rows")
    with pytest.raises(ValueError, match="layout 'rows'.*tile, super and interleaved"):
        MmaKernel(gemv=launcher, num_sms=132)
    with pytest.raises(ValueError, match="form 'early'.*plain, ahead"):
        MmaKernel(gemv=launcher, num_sms=132, layout="tile", form="early")


def test_the_tiling_takes_warps_a_tile_then_splits_up_to_the_warps_the_h200_ran_fastest():
    plans = {(n, k): mma_tiling.tiling(n, k, 132) for n, k in QWEN3_8B}
    T = mma_tiling.Tiling
    # qkv's 384 and o's 256 tiles get 4 warps a tile; gate_up's 1536 one; down's 96-superstep
    # runs also 2 splits (12 supersteps a warp, 2048 warps)
    assert plans == {(6144, 4096): T(1, 256, 4, 4), (24576, 4096): T(1, 256, 1, 4),
                     (4096, 12288): T(2, 384, 4, 4), (4096, 4096): T(1, 256, 4, 4)}
    for (n, k), plan in plans.items():
        assert plan.groups_per_split % 8 == 0 and -(-(k // 16) // plan.groups_per_split) == plan.splits
        warps = n // 16 * plan.kwarps * plan.splits
        assert warps <= mma_tiling.resident_warps(plan.stages) * 132
        assert warps >= mma_tiling.MIN_WARPS_PER_SM * 132
    assert mma_tiling.tiling(48, 256, 132) == T(1, 16, 1, 4)  # 2 supersteps: one warp, one split
    assert mma_tiling.tiling(128, 8192, 132) == T(4, 128, 4, 4)  # 8 tiles: 4 supersteps a warp at least
    assert mma_tiling.resident_warps(10) == 16 and mma_tiling.resident_warps(4) == 24
    assert mma_tiling.resident_warps(4, rows=16) == 16
    assert mma_tiling.groups_per_split(96, 5) == 24  # whole supersteps: 4 splits of 24, not 5


def test_the_tilings_shipped_for_a_gpu_model_are_taken_and_the_variable_overrides_them(tmp_path, monkeypatch):
    monkeypatch.setattr(mma_tiling, "TUNED_DIR", tmp_path)
    (tmp_path / "NVIDIA_H200.json").write_text('{"6144x4096": {"splits": 2, "kwarps": 1, "stages": 8}}')
    layer, x, packed, scales, bias = layer_of(6144, 4096)
    for name, want in (("NVIDIA H200", mma_tiling.Tiling(2, 128, 1, 8)),
                       ("NVIDIA H100 80GB HBM3", mma_tiling.tiling(6144, 4096, 132))):
        kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132, device_name=name)
        kernel.prepare_linear(layer, packed, scales)
        assert layer.nvfp4_mma_tiling == want, name
    (tmp_path / "plan.json").write_text('{"6144x4096": {"splits": 1, "kwarps": 2, "stages": 4}}')
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(tmp_path / "plan.json"))
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132, device_name="NVIDIA H200")
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling == mma_tiling.Tiling(1, 256, 2, 4)


def test_every_shipped_tilings_file_names_tilings_the_kernel_runs():
    import json

    files = sorted(mma_tiling.TUNED_DIR.glob("*.json"))
    assert {f.stem for f in files} >= {"NVIDIA_H200", "NVIDIA_H100_80GB_HBM3"}
    for path in files:
        for shape, entry in json.loads(path.read_text()).items():
            n, k = map(int, shape.split("x"))
            plan = mma_tiling.tiling(n, k, 132, {shape: entry})  # raises on a tiling it cannot run
            assert plan.kwarps == entry["kwarps"] and plan.stages == entry["stages"], (path.name, shape)
            assert (plan.rows16 is None) == ("r16" not in entry), (path.name, shape)
            assert (plan.few is None) == ("few" not in entry), (path.name, shape)


def test_a_tuned_tiling_file_overrides_the_plan_and_a_wrong_one_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text('{"6144x4096": {"splits": 3, "kwarps": 2, "stages": 8}}')
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(path))
    tuned = mma_tiling.tuned_tilings()
    assert mma_tiling.tiling(6144, 4096, 132, tuned) == mma_tiling.Tiling(3, 88, 2, 8)
    assert mma_tiling.tiling(4096, 4096, 132, tuned) == mma_tiling.tiling(4096, 4096, 132)  # not tuned
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    layer, x, packed, scales, bias = layer_of(6144, 4096)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling == mma_tiling.Tiling(3, 88, 2, 8)
    with pytest.raises(ValueError, match=r"6144x4096 .*kwarps of \(1, 2, 4\).*--plan-json"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 3, "stages": 4}})
    # any ring nvcc builds (2 .. MAX_STAGES supersteps), not only the depths MmaKernel builds first
    assert mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 4, "stages": 3}}).stages == 3
    with pytest.raises(ValueError, match="stages 2 to 10"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 4, "stages": 11}})
    with pytest.raises(ValueError, match="layouts tile, super, interleaved"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 1, "stages": 4,
                                                        "layout": "rows"}})
    # a tuned entry may name the weight's memory order and the kernel's form
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "layout": "interleaved", '
                    '"form": "xring", "prefetch": 256}}')
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling == mma_tiling.Tiling(1, 256, 4, 4, "interleaved", "xring", 256)
    # (stages, warps a tile, form, prefetch, tiles a warp at 9 .. 16 rows: two where built, column
    # map, the fewest rows of the 16-row kernel)
    assert list(kernel._gemvs) == [(4, 4, "xring", 256, 1, "contiguous", 9, False, "read", "end")]
    assert mma_layout.block_strides(layer.nvfp4_mma_words, layer.nvfp4_mma_scales)[1] == 72
    got = kernel.linear(layer, x[:1].contiguous(), bias, None)
    want = reference.linear(x[:1], packed, scales, layer.row_scale, bias)
    assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    # eight warps a tile (rings of <= 5 stages): its own launcher, no two tiles a warp
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 8, "stages": 4, "form": "bulk"}}')
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling == mma_tiling.Tiling(1, 256, 8, 4, None, "bulk")
    assert list(kernel._gemvs)[-1] == (4, 8, "bulk", 0, 1, "contiguous", 9, False, "read", "end")
    with pytest.raises(ValueError, match=r"kwarps of \(1, 2, 4\) \(or 8 with rings of <= 5\)"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 8, "stages": 8}})
    # launches spread over the multiprocessors: named by the tiling (its own launcher), else the
    # kernel's ($HINGE_NVFP4_MMA_SPREAD=1); anything but true or false refused
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "spread": true}}')
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.spread is True and list(kernel._gemvs)[-1][7] is True
    assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, (1,))
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4}}')
    monkeypatch.setenv("HINGE_NVFP4_MMA_SPREAD", "1")
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.spread is None and list(kernel._gemvs)[-1][7] is True
    monkeypatch.delenv("HINGE_NVFP4_MMA_SPREAD")
    # the next kernel let launch at the GEMV's start: named by the tiling, else the kernel's
    # ($HINGE_NVFP4_MMA_TRIGGER)
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "trigger": "start"}}')
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.trigger == "start" and list(kernel._gemvs)[-1][8] == "start"
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4}}')
    monkeypatch.setenv("HINGE_NVFP4_MMA_TRIGGER", "start")
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert list(kernel._gemvs)[-1][8] == "start"
    monkeypatch.setenv("HINGE_NVFP4_MMA_TRIGGER", "soon")
    with pytest.raises(ValueError, match="trigger 'soon': one of read, start"):
        MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    monkeypatch.delenv("HINGE_NVFP4_MMA_TRIGGER")
    # when the epilogue's row_scale is read: a PDL build's choice (its own launcher), at the end
    # without PDL (no wait to be early for); a time not built refused
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "row_scale": "wait"}}')
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.row_scale == "wait" and list(kernel._gemvs)[-1][9] == "end"
    kernel.pdl = True
    kernel.prepare_linear(layer, packed, scales)
    at_end, after_wait = list(kernel._gemvs)[-2:]
    assert after_wait[9] == "wait" and after_wait[:9] == at_end[:9]  # a launcher of its own
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4}}')  # names none: the kernel's
    monkeypatch.setenv("HINGE_NVFP4_MMA_ROW_SCALE", "start")
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.pdl = True
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.row_scale is None and list(kernel._gemvs)[-1][9] == "start"
    monkeypatch.setenv("HINGE_NVFP4_MMA_ROW_SCALE", "soon")
    with pytest.raises(ValueError, match="row_scale 'soon': one of end, start, wait"):
        MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    monkeypatch.delenv("HINGE_NVFP4_MMA_ROW_SCALE")
    with pytest.raises(ValueError, match="row_scale end or start or wait"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4,
                                                        "row_scale": "early"}})
    with pytest.raises(ValueError, match="trigger read or start"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "trigger": "end"}})
    with pytest.raises(ValueError, match='spread true, false or "least"'):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "spread": "yes"}})
    assert mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4,
                                                            "spread": "least"}}).spread == "least"
    # a column map: that weight repacked in it and launched by a launcher built for it (a
    # launcher of another map for it is refused), other shapes in the kernel's
    path.write_text('{"6144x4096": {"splits": 1, "kwarps": 4, "stages": 4, "columns": "coalesced"}}')
    kernel = MmaKernel(gemv=EmulatedLauncher("coalesced"), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.columns == "coalesced" and list(kernel._gemvs)[-1][5] == "coalesced"
    assert torch.equal(layer.nvfp4_mma_words, mma_layout.repack(packed, scales, "coalesced")[0])
    assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, (1, 16))
    with pytest.raises(ValueError, match="stood in computes column map 'coalesced', the layer is repacked in 'contiguous'"):
        kernel.prepare_linear(*layer_of(4096, 4096)[:1], *layer_of(4096, 4096)[2:4])
    with pytest.raises(ValueError, match="column maps contiguous, coalesced"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 1, "stages": 4,
                                                        "columns": "rows"}})
    path.write_text("{not json")
    with pytest.raises(ValueError, match="HINGE_NVFP4_MMA_PLAN=.*unset it"):
        MmaKernel(gemv=EmulatedLauncher(), num_sms=132)


def test_a_tuned_register_form_needs_its_own_sixteen_row_launch_and_one_two_or_four_warps_a_tile(
        tmp_path, monkeypatch):
    """``regs`` is built for 8 rows of x at 1, 2 or 4 warps a tile (``mma_gemv.ONE_SET``): a
    tuned entry naming it must name the launch of 9 .. 16 rows too; its launcher is its own."""
    r16 = {"kwarps": 4, "form": "plain", "tiles": 1}
    entry = {"splits": 1, "kwarps": 4, "stages": 4, "form": "regs", "r16": r16}
    plan = mma_tiling.tiling(6144, 4096, 132, {"6144x4096": entry})
    assert plan.form == "regs" and plan.rows16 == mma_tiling.Rows16(4, "plain", 1, 9)
    with pytest.raises(ValueError, match=r'takes the regs form, built for up to 8 rows of x alone: give it an "r16"'):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {k: v for k, v in entry.items() if k != "r16"}})
    with pytest.raises(ValueError, match="forms plain, ahead, xring, bulk, regs"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**entry, "kwarps": 8}})
    (tmp_path / "plan.json").write_text(json.dumps({"6144x4096": entry}))
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(tmp_path / "plan.json"))
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    layer, x, packed, scales, bias = layer_of(6144, 4096)
    kernel.prepare_linear(layer, packed, scales)
    assert [key[2] for key in kernel._gemvs] == ["regs", "plain"]  # 1 .. 8 rows, 9 .. 16 rows


def test_a_tuned_sixteen_row_launch_takes_nine_to_sixteen_rows_and_a_wrong_one_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text('{"128x8192": {"splits": 2, "kwarps": 4, "stages": 4, "form": "bulk", '
                    '"r16": {"kwarps": 2, "form": "plain", "tiles": 2}}}')
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(path))
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    layer, x, packed, scales, bias = layer_of(128, 8192)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.rows16 == mma_tiling.Rows16(2, "plain", 2)
    assert list(kernel._gemvs)[-2:] == [(4, 4, "bulk", 0, 2, "contiguous", 9, False, "read", "end"), (4, 2, "plain", 0, 2, "contiguous", 9, False, "read", "end")]
    # the stand-in launchers are one object: give the 16-row launch its own to see who runs what
    layer.nvfp4_mma_gemv16 = sixteen = EmulatedLauncher()
    few = layer.nvfp4_mma_gemv
    for rows in (1, 8, 9, 16):
        got = kernel.linear(layer, x[:rows].contiguous(), bias, None)
        want = reference.linear(x[:rows], packed, scales, layer.row_scale, bias)
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    assert [c[0][0] for c in few.calls[-2:]] == [1, 8] and [c[0][0] for c in sixteen.calls] == [9, 16]
    # "from": 5: the 16-row launch takes 5 .. 16 rows (its own launcher, rows16_from 5)
    path.write_text('{"128x8192": {"splits": 2, "kwarps": 4, "stages": 4, "form": "bulk", '
                    '"r16": {"kwarps": 2, "form": "plain", "tiles": 2, "from": 5}}}')
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    kernel.prepare_linear(layer, packed, scales)
    assert layer.nvfp4_mma_tiling.rows16 == mma_tiling.Rows16(2, "plain", 2, 5) and layer.nvfp4_mma_rows16_from == 5
    assert list(kernel._gemvs)[-1] == (4, 2, "plain", 0, 2, "contiguous", 5, False, "read", "end")
    layer.nvfp4_mma_gemv16 = sixteen = EmulatedLauncher()
    few = layer.nvfp4_mma_gemv
    for rows in (1, 4, 5, 8, 9):
        kernel.linear(layer, x[:rows].contiguous(), bias, None)
    assert [c[0][0] for c in few.calls[-2:]] == [1, 4] and [c[0][0] for c in sixteen.calls] == [5, 8, 9]
    for bad, why in (({"kwarps": 3, "form": "plain"}, "kwarps of"), ({"kwarps": 1, "form": "xring", "tiles": 2},
                                                                     "2 in the plain and bulk forms"),
                     ({"kwarps": 8, "form": "plain", "tiles": 2}, "up to 4 warps a tile"),
                     ({"kwarps": 2, "form": "plain", "from": 10}, "from 1 to 9 rows on")):
        with pytest.raises(ValueError, match=f"16-row MMA GEMV launch of 6144x4096 .*{why}"):
            mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 1, "stages": 4, "r16": bad}})
    with pytest.raises(ValueError, match="rings of <= 4 stages"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {"splits": 1, "kwarps": 1, "stages": 8,
                                                        "r16": {"kwarps": 1, "form": "plain", "tiles": 2}}})


def test_a_tuned_launch_of_the_fewest_rows_takes_one_to_upto_rows_and_a_wrong_one_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    entry = {"splits": 2, "kwarps": 4, "stages": 4, "form": "bulk", "few": {"form": "xring", "upto": 2, "stages": 3},
             "r16": {"kwarps": 2, "form": "plain", "tiles": 2, "from": 5}}
    path.write_text(json.dumps({"128x8192": entry}))
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(path))
    kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132)
    layer, x, packed, scales, bias = layer_of(128, 8192)
    kernel.prepare_linear(layer, packed, scales)
    plan = layer.nvfp4_mma_tiling
    assert plan.few.upto == 2 and layer.nvfp4_mma_few_upto == 2
    assert plan.few.plan == plan._replace(form="xring", stages=3, few=None)  # the entry, changed
    # three launchers: 3 .. 4 rows, 5 .. 16 rows (its own), 1 .. 2 rows (the tiling's, changed)
    assert [key[:3] for key in kernel._gemvs] == [(4, 4, "bulk"), (4, 2, "plain"), (3, 4, "xring")]
    layer.nvfp4_mma_gemv16, layer.nvfp4_mma_gemv_few = sixteen, few = EmulatedLauncher(), EmulatedLauncher()
    layer.nvfp4_mma_gemv = rest = EmulatedLauncher()
    for rows in (1, 2, 3, 4, 5, 16):
        got = kernel.linear(layer, x[:rows].contiguous(), bias, None)
        want = reference.linear(x[:rows], packed, scales, layer.row_scale, bias)
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    assert [[c[0][0] for c in g.calls] for g in (few, rest, sixteen)] == [[1, 2], [3, 4], [5, 16]]
    plain = {key: value for key, value in entry.items() if key != "few"}
    assert mma_tiling.tiling(128, 8192, 132, {"128x8192": {**plain, "few": {"kwarps": 8}}}).few.plan.kwarps == 8
    for bad, why in (({"form": "ring"}, "forms plain, ahead, xring, bulk"), ({"kwarps": 3}, r"kwarps of \(1, 2, 4\)"),
                     ({"form": "xring", "upto": 5}, r"up to 5 rows, not 1 \.\. 4 \(fewer than the 16-row launch takes\)"),
                     ({"upto": 0}, r"up to 0 rows, not 1 \.\. 4"),
                     ({"layout": "super", "splits": 1}, "names layout, splits, which are the entry's alone")):
        with pytest.raises(ValueError, match=f"launch of the fewest rows of 128x8192 .*{why}.*--sweep, or drop"):
            mma_tiling.tiling(128, 8192, 132, {"128x8192": {**plain, "few": bad}})
    # without a 16-row launch of its own, up to 8 rows
    assert mma_tiling.tiling(128, 8192, 132, {"128x8192": {"splits": 1, "kwarps": 4, "stages": 4,
                                                          "few": {"form": "xring", "upto": 8}}}).few.upto == 8


def test_with_the_checkpoints_codes_kept_everything_else_takes_the_triton_path(monkeypatch):
    triton_calls = []
    monkeypatch.setattr(TritonKernel, "linear", lambda self, layer, x, bias, act: triton_calls.append(
        (tuple(x.shape), x.dtype, act is not None)) or "triton")
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=132)  # dequant_rows 0: the codes stay
    layer, x, packed, scales, bias = layer_of(48, 128)
    assert kernel.prepare_linear(layer, packed, scales) is False and layer.nvfp4_packed is packed
    assert layer.nvfp4_mma_words is not None
    seventeen = torch.cat([x, x[:1]])
    assert kernel.linear(layer, seventeen, None, None) == "triton"  # more than 16 rows
    assert kernel.linear(layer, x.float(), None, None) == "triton"  # not bf16
    assert kernel.linear(layer, x[:2], None, torch.tensor(1.0)) == "triton"  # w4a4 activations
    odd, x2, packed2, scales2, _ = layer_of(24, 96)  # N % 16 and K % 128 both off
    assert kernel.prepare_linear(odd, packed2, scales2) is False and odd.nvfp4_mma_words is None
    assert kernel.linear(odd, x2[:1].contiguous(), None, None) == "triton"
    assert len(triton_calls) == 4 and not launcher.calls
    # strided or unaligned rows are copied for the GEMV (a copy of <= 16 rows, not the Triton GEMV)
    want = reference.linear(x, packed, scales, layer.row_scale, None)
    for strided in (x.t().contiguous().t(), torch.cat([x.view(-1)[:1], x.view(-1)])[1:].view(16, 128)):
        assert strided.data_ptr() % 16 or not strided.is_contiguous()
        got = kernel.linear(layer, strided, None, None)
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    assert len(launcher.calls) == 2 and len(triton_calls) == 4


def test_past_sixteen_rows_the_gemv_runs_sixteen_at_a_time_then_the_weight_is_dequantized_from_the_repack(
        monkeypatch):
    monkeypatch.setattr(TritonKernel, "linear", lambda *a: pytest.fail("the Triton path ran"))
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=132, dequant_rows=40)
    layer, x, packed, scales, bias = layer_of(48, 256)
    x = torch.cat([x, x.flip(0), x]).contiguous()  # 48 rows
    assert kernel.prepare_linear(layer, packed, scales) is True  # the codes: the caller may free them
    assert layer.nvfp4_packed is None and layer.nvfp4_scales is None
    assert kernel._buffer.numel() == 48 * 256 * 2  # one bf16 weight, reserved at load
    for rows, b, calls in ((17, bias, [(16, 256), (1, 256)]), (39, None, [(16, 256), (16, 256), (7, 256)]),
                           (40, bias, [("dequantize", (48, 256), 0)]), (48, None, [("dequantize", (48, 256), 0)])):
        launcher.calls.clear()
        got = kernel.linear(layer, x[:rows], b, None)
        want = reference.linear(x[:rows], packed, scales, layer.row_scale, b)
        assert got.shape == (rows, 48) and got.dtype == torch.bfloat16
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max(), rows
        assert [c[0] if c[0] != "dequantize" else c for c in launcher.calls] == calls, rows
    # the dequantized weight is the reference's, rounded once; any dtype of x goes through it
    w = kernel._buffer.view(torch.bfloat16)[: 48 * 256].view(48, 256)
    assert torch.equal(w, (reference.dequantize_unscaled(packed, scales) * layer.row_scale[:, None]).bfloat16())
    got = kernel.linear(layer, x[:3].float(), None, None)
    assert got.dtype == torch.float32 and launcher.calls[-1][0] == "dequantize"


def test_a_paired_gate_up_past_sixteen_rows_is_gated_in_sixteen_row_launches_and_dequantized_in_its_order():
    launcher = EmulatedLauncher()
    kernel = MmaKernel(gemv=launcher, num_sms=132, dequant_rows=64)
    layer, x, packed, scales = gate_up_layer(96, 256)
    assert kernel.prepare_linear(layer, packed, scales) is True
    x = torch.cat([x, x, x, x]).contiguous()  # 64 rows
    want = reference.linear(x, packed, scales, layer.row_scale, None)
    gated = kernel.gated(layer, x[:20], "silu")
    gate, up = want[:20].float().chunk(2, dim=-1)
    silu = gate / (1.0 + torch.exp(-gate)) * up
    assert gated.shape == (20, 96) and (gated.float() - silu).abs().max() <= 3e-2 * silu.abs().max()
    assert [c[0][0] for c in launcher.calls] == [16, 4] and all(c[4] for c in launcher.calls)
    assert kernel.gated(layer, x, "silu") is None  # 64 rows: the caller's activation, after linear
    got = kernel.linear(layer, x, None, None)
    assert launcher.calls[-1] == ("dequantize", (192, 256), 6)  # [gate | up] rows again
    assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()


def test_the_quantizer_frees_the_checkpoint_codes_a_kernel_no_longer_reads():
    from nvfp4_helpers import build, nvfp4_mlp

    from hinge_nvfp4.quantizer import NVFP4Quantizer

    for rows, freed in ((64, True), (0, False)):
        q = NVFP4Quantizer(NVFP4Options(), build(dtype=torch.bfloat16))
        q.kernel = MmaKernel(gemv=EmulatedLauncher(), num_sms=132, dequant_rows=rows)
        mlp = nvfp4_mlp(256, 512, device="cpu", quantizer=q)
        for layer in (mlp.gate_up_proj, mlp.down_proj):
            assert (layer.weight.numel() == 0 and layer.weight_scale.numel() == 0) == freed
            assert layer.weight.dtype == torch.uint8 and layer.nvfp4_mma_words is not None
        x = torch.randn(70, 256, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
        if freed:
            assert mlp(x).shape == (70, 256)  # 70 rows: dequantized from the repack, gate_up and down


def test_two_tiles_a_warp_at_sixteen_rows_is_an_option_and_a_wrong_count_is_refused(monkeypatch):
    assert MmaKernel(gemv=EmulatedLauncher(), num_sms=132).tiles16 == MmaKernel.TILES16
    monkeypatch.setenv("HINGE_NVFP4_MMA_TILES16", "2")
    assert MmaKernel(gemv=EmulatedLauncher(), num_sms=132).tiles16 == 2
    monkeypatch.setenv("HINGE_NVFP4_MMA_TILES16", "4")
    with pytest.raises(ValueError, match="HINGE_NVFP4_MMA_TILES16=4: 1 or 2 tiles a warp"):
        MmaKernel(gemv=EmulatedLauncher(), num_sms=132)


def test_auto_takes_mma_on_hopper_for_a_bf16_w4a16_model_in_default_mode_and_triton_if_it_cannot_build(
        monkeypatch, caplog):
    from hinge_nvfp4 import kernels

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(kernels, "MmaKernel", lambda dequant_rows: ("mma", dequant_rows))
    auto = NVFP4Options()
    assert select_kernel(auto, "cuda", False, torch.bfloat16) == ("mma", 64)
    for options, det, dtype in ((auto, True, torch.bfloat16), (auto, False, torch.float16), (auto, False, None),
                                (NVFP4Options(activations="w4a4"), False, torch.bfloat16),
                                (NVFP4Options(kernel="triton"), False, torch.bfloat16)):
        assert isinstance(select_kernel(options, "cuda", det, dtype), TritonKernel), (options, det, dtype)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
    assert isinstance(select_kernel(auto, "cuda", False, torch.bfloat16), TritonKernel)  # not measured there
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))

    def no_nvcc(dequant_rows):
        raise FileNotFoundError("nvcc is not on PATH")

    monkeypatch.setattr(kernels, "MmaKernel", no_nvcc)
    with caplog.at_level("WARNING", logger="hinge_nvfp4.kernels"):
        assert isinstance(select_kernel(auto, "cuda", False, torch.bfloat16), TritonKernel)
    assert "kernel=mma) could not be built, running kernel=triton: nvcc is not on PATH" in caplog.text
    with pytest.raises(FileNotFoundError):  # asked for by name: its error, not a silent fallback
        select_kernel(NVFP4Options(kernel="mma"), "cuda", False, torch.bfloat16)
    with pytest.raises(ValueError, match="bf16 activations and this model runs float16; use dtype bfloat16"):
        select_kernel(NVFP4Options(kernel="mma"), "cuda", False, torch.float16)


def test_the_option_is_refused_where_it_cannot_run_naming_the_alternative():
    with pytest.raises(ValueError, match="runs on CUDA only"):
        select_kernel(NVFP4Options(kernel="mma"), "cpu", False)
    with pytest.raises(ValueError, match="default mode.*kernel=triton"):
        select_kernel(NVFP4Options(kernel="mma"), "cuda", True)
    with pytest.raises(ValueError, match="W4A16"):
        select_kernel(NVFP4Options(kernel="mma", activations="w4a4"), "cuda", False)


def test_a_gpu_before_hopper_is_refused_naming_its_capability_and_the_alternative(monkeypatch):
    from hinge_nvfp4 import kernels

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    with pytest.raises(ValueError, match=r"compute capability >= 9.0 .*has 8.0; use kernel=triton"):
        kernels._mma_launcher(4, 1, "plain", 0)


@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
def test_the_repack_in_row_blocks_equals_the_repack_at_once(columns):
    _, _, packed, _, _ = layer_of(80, 128, seed=3)
    assert torch.equal(mma_layout.repack_codes(packed, rows_at_once=32, columns=columns),
                       mma_layout.repack_codes(packed, columns=columns))


def test_the_coalesced_column_map_is_repacked_and_launched_as_its_cubin_reads_it(monkeypatch):
    # kernel: mma with columns="coalesced" (or $HINGE_NVFP4_MMA_COLUMNS) repacks in that map and
    # the launcher emulating that map gives the reference, plain and gated; a launcher of the
    # other map, or a map of no name, is refused
    for make in (lambda: MmaKernel(gemv=EmulatedLauncher("coalesced"), num_sms=132, columns="coalesced"),
                 lambda: monkeypatch.setenv("HINGE_NVFP4_MMA_COLUMNS", "coalesced")
                 or MmaKernel(gemv=EmulatedLauncher("coalesced"), num_sms=132)):
        kernel = make()
        assert kernel.columns == "coalesced"
        layer, x, packed, scales, bias = layer_of(128, 2048)
        kernel.prepare_linear(layer, packed, scales)
        words, codes = mma_layout.repack(packed, scales, "coalesced")
        assert torch.equal(layer.nvfp4_mma_words, words) and torch.equal(layer.nvfp4_mma_scales, codes)
        assert not torch.equal(words, mma_layout.repack(packed, scales, "contiguous")[0])
        assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, (1, 5, 16))
        monkeypatch.delenv("HINGE_NVFP4_MMA_COLUMNS", raising=False)
    gate_up = MmaKernel(gemv=EmulatedLauncher("coalesced"), num_sms=132, columns="coalesced")
    layer, x, packed, scales = gate_up_layer(64, 512)
    gate_up.prepare_linear(layer, packed, scales)
    plain, gated = gate_up.linear(layer, x[:3].contiguous(), None, None), gate_up.gated(layer, x[:3].contiguous(), "silu")
    gate, up = plain.float().chunk(2, dim=-1)
    assert torch.equal(gated, (gate / (1.0 + torch.exp(-gate)) * up).to(torch.bfloat16))
    with pytest.raises(ValueError, match="stood in computes column map 'coalesced', the layer is repacked in 'contiguous'"):
        MmaKernel(gemv=EmulatedLauncher("coalesced"), num_sms=132, columns="contiguous").prepare_linear(
            *layer_of(128, 2048)[:1], *layer_of(128, 2048)[2:4])
    monkeypatch.setenv("HINGE_NVFP4_MMA_COLUMNS", "rows")
    with pytest.raises(ValueError, match=r"column map 'rows': the maps are contiguous, coalesced \(HINGE_NVFP4_MMA_COLUMNS\)"):
        MmaKernel(gemv=EmulatedLauncher(), num_sms=132)


def test_the_cubin_is_built_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    builds = []
    monkeypatch.setattr(mma_gemv, "build_cubin",
                        lambda arch, stages, prefetch, pdl, warps, columns, trigger="read", row_scale="end", wg=False:
                        builds.append((arch, stages, warps, columns) + (() if trigger == "read" else (trigger,))
                                      + (() if row_scale == "end" else (row_scale,)) + (("wg",) if wg else ()))
                        or b"cubin")
    assert mma_gemv.cached_cubin("sm_90", 8, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 8, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, warps=8) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, columns="coalesced") == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, pdl=True, trigger="start") == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, pdl=True, trigger="start") == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, row_scale="start") == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, row_scale="wait") == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, row_scale="end") == b"cubin"  # the default's file
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, wg=True) == b"cubin"
    assert mma_gemv.cached_cubin("sm_90", 4, tmp_path, wg=True) == b"cubin"
    assert builds == [("sm_90", 8, 4, "contiguous"), ("sm_90", 4, 4, "contiguous"), ("sm_90", 4, 8, "contiguous"),
                      ("sm_90", 4, 4, "coalesced"), ("sm_90", 4, 4, "contiguous", "start"),
                      ("sm_90", 4, 4, "contiguous", "start"), ("sm_90", 4, 4, "contiguous", "wait"),
                      ("sm_90", 4, 4, "contiguous", "wg")]
    assert len(list(tmp_path.glob("mma_gemv-sm_90-*.cubin"))) == 8 and not list(tmp_path.glob("*.tmp"))


@pytest.mark.gpu
@pytest.mark.parametrize("tiles16, columns", [("1", "contiguous"), ("2", "contiguous"), ("2", "coalesced")])
def test_cuda_mma_gemv_equals_the_reference_on_qwen3_8b_shapes_eager_and_in_a_graph(tiles16, columns, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setenv("HINGE_NVFP4_MMA_TILES16", tiles16)
    monkeypatch.setenv("HINGE_NVFP4_MMA_COLUMNS", columns)
    kernel = select_kernel(NVFP4Options(kernel="mma"), "cuda", False)
    for n, k in QWEN3_8B:
        layer, x, packed, scales, bias = layer_of(n, k, seed=n, device="cuda")
        kernel.prepare_linear(layer, packed, scales)
        assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, (1, 2, 5, 8, 9, 12, 16))
        for rows in (1, 16):
            static = x[:rows].contiguous()
            eager = kernel.linear(layer, static, bias, None)
            assert torch.equal(_replayed(kernel.linear, layer, static, bias, None), eager), (n, k, rows)


def _replayed(fn, *args):
    """``fn(*args)`` captured in a CUDA graph and replayed once: the captured output after the
    replay."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    graph.replay()
    torch.cuda.synchronize()
    return out


def _launch(gemv, xr, weight, per_split, paired=False, gated=False):
    """``gemv`` (an ``MmaGemv``) over x rows ``xr`` and ``weight`` = (words, codes, row_scale,
    bias), K in splits of ``per_split`` groups added in the kernel; its bf16 output. ``paired``:
    a fused [gate | up] repacked in ``mma_layout.pair_rows`` order (no bias), out in [gate | up]
    order; ``gated`` (paired): silu(gate) * up."""
    words, codes, row_scale, bias = weight
    n, splits = words.shape[0] * 16, -(-(xr.shape[1] // 16) // per_split)
    out = torch.empty(xr.shape[0], n // 2 if gated else n, dtype=torch.bfloat16, device=xr.device)
    part = torch.empty(splits, xr.shape[0], n, device=xr.device) if splits > 1 or gated else None
    return gemv(words, codes, xr, part, per_split, row_scale=row_scale, bias=bias, out=out,
                pair_tiles=n // 32 if paired or gated else 0, gated=gated)


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
def test_cuda_asking_l2_for_the_run_before_the_wait_changes_no_bit(columns):
    """``prefetch="run"`` (a PDL build: each warp asks L2 for its run before griddepcontrol.wait)
    against the PDL build without it: the same bits, every ring form, 1, 2 and 4 warps a tile,
    every memory order, 1, 8 and 16 rows, K split or not; and in a CUDA graph."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    run, plain = (mma_gemv.cached_cubin(arch, 4, prefetch=pf, pdl=True, columns=columns) for pf in ("run", 0))
    for n, k, per_split in ((6144, 4096, 256), (4096, 12288, 96), (400, 256, 16)):
        x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=k, device="cuda")
        for form, kw, order in ((f, kw, o) for f in sorted(mma_gemv.KERNELS) for kw in mma_gemv.KWARPS
                                for o in mma_layout.LAYOUTS):
            words, codes = mma_layout.in_order(*mma_layout.repack(packed, scales, columns), order)
            gemvs = [mma_gemv.MmaGemv(cubin, form, 4, kw, pdl=True, columns=columns) for cubin in (run, plain)]
            for gemv in gemvs:
                gemv.reserve_counters(n // 16, torch.device("cuda"))
            call = functools.partial(_launch, weight=(words, codes, row_scale, bias), per_split=per_split)
            for rows in (1, 8, 16):
                xr = x[:rows].contiguous()
                assert torch.equal(call(gemvs[0], xr), call(gemvs[1], xr)), (form, columns, n, k, kw, order, rows)
            if order == "super" and kw == 4:
                xr = x[:1].contiguous()
                eager = call(gemvs[0], xr)
                assert torch.equal(_replayed(call, gemvs[0], xr), eager), (form, columns, n, k)


def _same_bits_in_every_tiling(columns, builds):
    """Each of ``builds`` (label -> (cubin of ``WARPS`` warps a block, of ``WIDE_WARPS``, ring
    stages), PDL builds) gives the first one's bits: every GEMV form, 1, 2, 4 and 8 warps a tile,
    every memory order, 1, 8 and 16 rows (two tiles a warp where every build has them), K split
    or not, a tile count past N."""
    for n, k, per_split in ((6144, 4096, 256), (4096, 12288, 96), (400, 256, 16)):
        x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=k, device="cuda")
        for form, kw, order in ((f, kw, o) for f in sorted(mma_gemv.KERNELS)
                                for kw in mma_gemv.KWARPS + (mma_gemv.WIDE_WARPS,) for o in mma_layout.LAYOUTS):
            words, codes = mma_layout.in_order(*mma_layout.repack(packed, scales, columns), order)
            call = functools.partial(_launch, weight=(words, codes, row_scale, bias), per_split=per_split)
            two = kw != mma_gemv.WIDE_WARPS and all(mma_gemv.two_tiles_built(form, st, kw) for *_, st in builds.values())
            for tiles16 in (1, 2) if two else (1,):
                gemvs = {label: mma_gemv.MmaGemv(cubins[kw == mma_gemv.WIDE_WARPS], form, stages, kw, pdl=True,
                                                 tiles16=tiles16, columns=columns)
                         for label, (*cubins, stages) in builds.items()}
                for gemv in gemvs.values():
                    gemv.reserve_counters(n // 16, torch.device("cuda"))
                for rows in (1, 8, 16) if tiles16 == 1 else (16,):
                    xr = x[:rows].contiguous()
                    first, *others = (call(gemv, xr) for gemv in gemvs.values())
                    for label, got in zip(list(gemvs)[1:], others, strict=True):
                        assert torch.equal(got, first), (label, form, columns, n, k, kw, order, rows, tiles16)


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
def test_cuda_rings_of_two_and_three_give_the_bits_of_a_ring_of_four(columns):
    """PDL builds (trigger start, as the shipped files launch) with rings of 2 and 3 supersteps
    (``launch_chain``'s ``shallow`` variants) against a ring of 4, over every tiling
    (``_same_bits_in_every_tiling``)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    major, minor = torch.cuda.get_device_capability()
    _same_bits_in_every_tiling(columns, {
        stages: (*(mma_gemv.cached_cubin(f"sm_{major}{minor}", stages, pdl=True, warps=warps, columns=columns,
                                         trigger="start") for warps in (mma_gemv.WARPS, mma_gemv.WIDE_WARPS)), stages)
        for stages in (4, 3, 2)})


@pytest.mark.gpu
def test_cuda_a_launch_spread_with_the_least_padding_gives_the_bits_of_one_padded_to_its_share_and_asks_less():
    """Spread "least" (``spread_blocks_bytes`` least) against spread True and not spread, one
    PDL build (trigger start): the padding is shared memory no thread touches, so the bits are
    the same; and qkv's launch (384 blocks, 3 a multiprocessor) asks for fewer bytes."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    major, minor = torch.cuda.get_device_capability()
    cubin = mma_gemv.cached_cubin(f"sm_{major}{minor}", 4, pdl=True, columns="coalesced", trigger="start")
    for n, k in ((6144, 4096), (24576, 4096)):
        x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        words, codes = mma_layout.repack(packed, scales, "coalesced")
        call = functools.partial(_launch, weight=(words, codes, row_scale, bias), per_split=k // 16)
        for form, kw in (("plain", 1), ("bulk", 4)):
            gemvs = {spread: mma_gemv.MmaGemv(cubin, form, 4, kw, pdl=True, columns="coalesced", spread=spread)
                     for spread in mma_gemv.SPREADS}
            for rows in (1, 8, 16):
                first, *others = (call(gemv, x[:rows].contiguous()) for gemv in gemvs.values())
                for spread, got in zip(mma_gemv.SPREADS[1:], others, strict=True):
                    assert torch.equal(got, first), (spread, form, kw, n, rows)
            if (n, form) == (6144, "bulk"):
                padded, least = gemvs[True], gemvs["least"]
                assert least.spread_bytes(least.function, 384, 1) < padded.spread_bytes(padded.function, 384, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
@pytest.mark.parametrize("when", ["start", "wait"])
def test_cuda_reading_row_scale_before_the_loop_changes_no_bit_plain_or_gated(when, columns):
    """``row_scale`` "start" (read before the wait) and "wait" (right after it) against the same
    PDL build reading it in the epilogue, over every tiling (``_same_bits_in_every_tiling``);
    and a paired [gate | up], plain and gated (finish_pair's path at two tiles a warp)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    major, minor = torch.cuda.get_device_capability()
    cubins = {(read, warps): mma_gemv.cached_cubin(f"sm_{major}{minor}", 4, pdl=True, warps=warps, columns=columns,
                                                   trigger="start", row_scale=read)
              for read in ("end", when) for warps in (mma_gemv.WARPS, mma_gemv.WIDE_WARPS)}
    _same_bits_in_every_tiling(columns, {read: (cubins[read, mma_gemv.WARPS], cubins[read, mma_gemv.WIDE_WARPS], 4)
                                         for read in ("end", when)})

    def pair(form, kw, tiles16):
        return [mma_gemv.MmaGemv(cubins[read, mma_gemv.block_warps(kw)], form, 4, kw, pdl=True, tiles16=tiles16,
                                 columns=columns) for read in ("end", when)]

    n, k = 192, 2560  # a paired [gate | up], one split: the pair's tiles in one warp (two a warp) or a block
    x, packed, scales, row_scale, _ = problem(16, n, k, dtype=torch.bfloat16, seed=n + k, device="cuda")
    order = mma_layout.pair_rows(n).cuda()
    words, codes = mma_layout.repack(packed[order], scales[order], columns)
    for form, kw in ((f, kw) for f in sorted(mma_gemv.KERNELS) for kw in mma_gemv.KWARPS):
        for tiles16 in (1, 2) if mma_gemv.two_tiles_built(form, 4, kw) else (1,):
            late, early = pair(form, kw, tiles16)
            for gemv in (late, early):
                gemv.reserve_counters(n // 16 + n // 32, torch.device("cuda"))
            for rows, gated in ((r, g) for r in ((1, 8, 16) if tiles16 == 1 else (16,)) for g in (False, True)):
                xr = x[:rows].contiguous()
                got = [_launch(gemv, xr, (words, codes, row_scale[order], None), k // 16, paired=True, gated=gated)
                       for gemv in (early, late)]
                assert torch.equal(*got), (form, columns, kw, rows, tiles16, gated, when)


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
@pytest.mark.parametrize("pdl", [False, True])
def test_cuda_the_register_form_gives_the_plain_forms_bits_in_every_tiling_and_layout(columns, pdl):
    """``regs`` (no ring in shared memory, 8 supersteps in flight in registers) against ``plain``
    of the same cubin: the same MMAs in the same order, so the same bits, at 1, 3 and 8 rows, 1,
    2 and 4 warps a tile (runs of 1 .. 32 supersteps: fewer than 8, 8, 24 refills), K
    split or not, every memory order, and gated; the PDL build in a CUDA graph too; 9 rows
    refused."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    major, minor = torch.cuda.get_device_capability()
    cubin = mma_gemv.cached_cubin(f"sm_{major}{minor}", 4, pdl=pdl, columns=columns)
    for n, k, per_split in ((6144, 4096, 256), (4096, 12288, 96), (48, 2560, 64), (400, 256, 16)):
        x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=k, device="cuda")
        for kw, order in ((kw, order) for kw in mma_gemv.KWARPS for order in mma_layout.LAYOUTS):
            words, codes = mma_layout.in_order(*mma_layout.repack(packed, scales, columns), order)
            regs, plain = (mma_gemv.MmaGemv(cubin, form, 4, kw, pdl=pdl, columns=columns) for form in ("regs", "plain"))
            for gemv in (regs, plain):
                gemv.reserve_counters(n // 16, torch.device("cuda"))
            run = functools.partial(_launch, weight=(words, codes, row_scale, bias), per_split=per_split)
            for rows in (1, 3, 8):
                xr = x[:rows].contiguous()
                assert torch.equal(run(regs, xr), run(plain, xr)), (columns, pdl, n, k, kw, order, rows)
            if pdl and order == "super":
                xr = x[:1].contiguous()
                eager = run(regs, xr)
                assert torch.equal(_replayed(run, regs, xr), eager), (columns, n, k, kw)
            with pytest.raises(ValueError, match="8 rows at most"):
                run(regs, x[:9].contiguous())
    # gated (silu(gate) * up in the epilogue, the pair's tiles meeting in shared memory or
    # through part and the counters): the plain form's bits too
    for n, k, per_split in ((24576, 4096, 256), (192, 2560, 64)):
        x, packed, scales, row_scale, _ = problem(8, n, k, dtype=torch.bfloat16, seed=n + k, device="cuda")
        order = mma_layout.pair_rows(n).cuda()
        weight = (*mma_layout.repack(packed[order], scales[order], columns), row_scale[order], None)
        for kw in mma_gemv.KWARPS:
            regs, plain = (mma_gemv.MmaGemv(cubin, form, 4, kw, pdl=pdl, columns=columns) for form in ("regs", "plain"))
            for gemv in (regs, plain):
                gemv.reserve_counters(n // 16 + n // 32, torch.device("cuda"))
            for rows in (1, 8):
                xr = x[:rows].contiguous()
                assert torch.equal(_launch(regs, xr, weight, per_split, gated=True),
                                   _launch(plain, xr, weight, per_split, gated=True)), (columns, pdl, n, kw, rows)


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
@pytest.mark.parametrize("form", sorted(mma_gemv.KERNELS))
def test_cuda_every_form_with_one_two_four_or_eight_warps_a_tile_in_every_layout_equals_the_reference(form, columns):
    # qkv and down (4 and 8 splits); 3 tiles of 20 supersteps in splits of 8, 8, 4 (4 warps a tile:
    # runs of 2 and of 1; 2 warps a tile: the second block's second tile is past N; 8: runs of 1,
    # some slices without a superstep); 25 tiles of 2 supersteps in one split (4 and 8 warps a
    # tile: some of them have no superstep). 8 warps a tile: the cubin of 8 warps a block
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    major, minor = torch.cuda.get_device_capability()
    stages = 4
    cubins = {(pf, warps): mma_gemv.cached_cubin(f"sm_{major}{minor}", stages, prefetch=pf, warps=warps,
                                                 columns=columns)
              for pf in (0, 256) for warps in (mma_gemv.WARPS, mma_gemv.WIDE_WARPS)}
    for n, k, per_split in ((6144, 4096, 64), (4096, 12288, 96), (48, 2560, 64), (400, 256, 16)):
        x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=k, device="cuda")
        for kw, order in ((kw, order) for kw in mma_gemv.KWARPS + (mma_gemv.WIDE_WARPS,)
                          for order in mma_layout.LAYOUTS):
            words, codes = mma_layout.in_order(*mma_layout.repack(packed, scales, columns), order)
            # the copies' L2 prefetch changes no result: 256 bytes with the interleaved layout
            cubin = cubins[256 if order == "interleaved" else 0, mma_gemv.block_warps(kw)]
            # and at 9 .. 16 rows two tiles a warp where built (the second of 25 or 3 tiles'
            # last warp past N)
            gemvs = [mma_gemv.MmaGemv(cubin, form, stages, kw, columns=columns)] + (
                [mma_gemv.MmaGemv(cubin, form, stages, kw, tiles16=2, columns=columns)]
                if mma_gemv.two_tiles_built(form, stages, kw) else [])
            for gemv in gemvs:
                gemv.reserve_counters(n // 16, torch.device("cuda"))
                for rows in (1, 3, 8, 9, 16) if gemv.tiles16 == 1 else (9, 16):
                    xr = x[:rows].contiguous()
                    got = _launch(gemv, xr, (words, codes, row_scale, bias), per_split)
                    want = reference.linear(xr, packed, scales, row_scale, bias)
                    err = (got.float() - want.float()).abs().max() / want.float().abs().max()
                    assert err < 1e-2, (form, columns, kw, order, n, k, rows, gemv.tiles16, float(err))


@pytest.mark.gpu
def test_cuda_a_pdl_gemv_after_an_early_triggering_norm_reads_the_norms_output_eager_and_in_a_graph(monkeypatch):
    # HINGE_PDL=1: add_rmsnorm lets its dependents launch at its start; the GEMV, launched with
    # programmatic serialization, must still read the x the norm writes (a stale x: wrong output)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a CUDA GPU of compute capability >= 9.0")
    from hinge.layers.fast_triton.add_rmsnorm import add_rmsnorm

    monkeypatch.setenv("HINGE_PDL", "1")
    kernel = select_kernel(NVFP4Options(kernel="mma"), "cuda", False)
    assert kernel.pdl
    for n, k in QWEN3_8B:
        _, packed, scales, row_scale, bias = problem(1, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        layer = torch.nn.Module()
        layer.row_scale = row_scale
        kernel.prepare_linear(layer, packed, scales)
        hidden, residual = (torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        weight = torch.rand(k, device="cuda", dtype=torch.bfloat16) + 0.5

        def step(hidden=hidden, residual=residual, weight=weight, layer=layer, bias=bias):
            x, _ = add_rmsnorm(hidden, residual, weight, 1e-6)
            return x, kernel.linear(layer, x, bias, None)

        x, got = step()
        want = reference.linear(x, packed, scales, row_scale, bias)
        err = (got.float() - want.float()).abs().max() / want.float().abs().max()
        assert err < 1e-2, (n, k, float(err))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_x, static_out = step()
        for _ in range(3):  # new inputs each replay: the GEMV must see this replay's norm output
            hidden.copy_(torch.randn_like(hidden))
            graph.replay()
            want = reference.linear(static_x, packed, scales, row_scale, bias)
            err = (static_out.float() - want.float()).abs().max() / want.float().abs().max()
            assert err < 1e-2, (n, k, float(err))


@pytest.mark.gpu
@pytest.mark.parametrize("form", sorted(mma_gemv.KERNELS))
def test_cuda_a_gated_gemv_gives_the_bits_of_the_gemv_then_silu_mul_in_every_form_and_tiling(form):
    # Qwen3-8B's gate_up (one split) and small ones in 1, 3 splits with 1, 2, 4 warps a tile:
    # the pair's tiles meet in shared memory (one split, 1 or 2 warps a tile) or through part and
    # the pair counters (splits, 4 warps a tile); eager, then over graph replays
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a CUDA GPU of compute capability >= 9.0")
    from hinge.layers.fast_triton.silu_mul import silu_mul

    major, minor = torch.cuda.get_device_capability()
    for pdl in (False, True):
        cubin = mma_gemv.cached_cubin(f"sm_{major}{minor}", 4, pdl=pdl)
        for n, k, per_split in ((24576, 4096, 256), (192, 2560, 64), (96, 1024, 64), (64, 256, 16)):
            x, packed, scales, row_scale, _ = problem(16, n, k, dtype=torch.bfloat16, seed=n + k, device="cuda")
            order = mma_layout.pair_rows(n).cuda()
            words, codes = mma_layout.repack(packed[order], scales[order])
            for kw, tiles16 in [(kw, t) for kw in mma_gemv.KWARPS for t in (1, 2)
                                if t == 1 or form in mma_gemv.T2_FORMS]:
                gemv = mma_gemv.MmaGemv(cubin, form, 4, kw, pdl, tiles16=tiles16)
                gemv.reserve_counters(n // 16 + n // 32, torch.device("cuda"))
                run = functools.partial(_launch, gemv, weight=(words, codes, row_scale[order], None),
                                        per_split=per_split, paired=True)
                for rows in (1, 3, 8, 11, 16) if tiles16 == 1 else (11, 16):
                    xr = x[:rows].contiguous()
                    plain = run(xr, gated=False)
                    want = reference.linear(xr, packed, scales, row_scale, None)
                    err = (plain.float() - want.float()).abs().max() / want.float().abs().max()
                    assert err < 1e-2, (form, kw, pdl, n, k, rows, tiles16, float(err))
                    assert torch.equal(run(xr, gated=True), silu_mul(plain)), (form, kw, pdl, n, k, rows, tiles16)
                # 13 rows: the 16-row kernel's graph
                static = x[:2 if kw < 4 and tiles16 == 1 else 13].contiguous()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = run(static, gated=True)
                for _ in range(2):
                    static.copy_(torch.randn_like(static))
                    graph.replay()
                    torch.cuda.synchronize()
                    assert torch.equal(captured, silu_mul(run(static, gated=False))), (form, kw, pdl, n, k)


@pytest.mark.gpu
def test_cuda_norms_and_gemvs_launched_early_behind_a_triggering_gemv_read_its_output_eager_and_in_a_graph():
    # the GEMV triggers its dependents once its weights are read; add_rmsnorm,
    # qk_norm_rope and the o GEMV on qkv's q, launched with programmatic serialization, must wait
    # for their input (stale x: wrong result)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a CUDA GPU of compute capability >= 9.0")
    from hinge.layers.fast_triton.add_rmsnorm import add_rmsnorm
    from hinge.layers.fast_triton.qk_norm_rope import qk_norm_rope

    kernel = select_kernel(NVFP4Options(kernel="mma"), "cuda", False)
    assert kernel.pdl
    layers = {}
    for n, k in ((4096, 12288), (6144, 4096), (4096, 4096)):
        x, packed, scales, row_scale, _ = problem(1, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        layer = torch.nn.Module()
        layer.row_scale = row_scale
        kernel.prepare_linear(layer, packed, scales)
        layers[n, k] = (layer, x.contiguous())
    residual = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    head_w = torch.rand(128, device="cuda", dtype=torch.bfloat16) + 0.5
    cos, sin = torch.rand(1, 1, 128, device="cuda"), torch.rand(1, 1, 128, device="cuda")

    def step():
        down = kernel.linear(*layers[4096, 12288], None, None)
        normed, _ = add_rmsnorm(down, residual, weight, 1e-6)
        qkv = kernel.linear(*layers[6144, 4096], None, None)
        o = kernel.linear(layers[4096, 4096][0], qkv[:, :4096], None, None)  # a GEMV behind a GEMV
        q, k = qkv[:, :4096].view(1, 32, 128), qkv[:, 4096:5120].view(1, 8, 128)
        return (down, qkv), (normed, o, *qk_norm_rope(q, k, head_w, head_w, 1e-6, cos.to(q.dtype), sin.to(q.dtype)))

    def expected(down, qkv):
        normed, _ = add_rmsnorm(down.clone(), residual, weight, 1e-6)
        torch.cuda.synchronize()
        o = kernel.linear(layers[4096, 4096][0], qkv[:, :4096].clone(), None, None)
        q, k = qkv[:, :4096].reshape(1, 32, 128), qkv[:, 4096:5120].reshape(1, 8, 128)
        return (normed, o, *qk_norm_rope(q.clone(), k.clone(), head_w, head_w, 1e-6, cos.to(q.dtype),
                                         sin.to(q.dtype)))

    (inputs, got) = step()
    torch.cuda.synchronize()
    for a, b in zip(got, expected(*inputs), strict=True):
        assert torch.equal(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_in, static_out = step()
    for _ in range(3):
        for _layer, x in layers.values():
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(static_out, expected(*static_in), strict=True):
            assert torch.equal(a, b)


@pytest.mark.gpu
def test_cuda_the_nvfp4_mlp_with_the_gated_gemv_equals_the_unfused_mlp_eager_and_in_a_graph():
    # GatedMLP over nvfp4 kernel mma: the fused path (gated gate_up, then down launched early
    # behind it) gives the bits of gate_up, silu_mul, down
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a CUDA GPU of compute capability >= 9.0")
    from nvfp4_helpers import nvfp4_mlp

    from hinge.layers.fast_triton.silu_mul import silu_mul

    mlp = nvfp4_mlp(hidden=1024, inter=3072, kernel="mma")
    x = torch.randn(1, 1024, dtype=torch.bfloat16, device="cuda")
    unfused = mlp.down_proj(silu_mul(mlp.gate_up_proj(x)))
    assert torch.equal(mlp(x), unfused)
    graph = torch.cuda.CUDAGraph()
    static = x.clone()
    with torch.cuda.graph(graph):
        out = mlp(static)
    for _ in range(3):
        static.copy_(torch.randn_like(static))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, mlp.down_proj(silu_mul(mlp.gate_up_proj(static))))


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


@pytest.mark.gpu
def test_cuda_the_weight_dequantized_from_the_repack_has_the_bits_of_the_triton_dequantization():
    # every memory order and column map (natural on an sm_90 card), a paired [gate | up] too: MmaGemv.dequantize ==
    # triton_gemm.dequantize_weight == the reference rounded to nearest even, bit for bit
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from hinge_nvfp4.triton_gemm import dequantize_weight

    major, minor = torch.cuda.get_device_capability()
    gemvs = {columns: mma_gemv.MmaGemv(mma_gemv.cached_cubin(f"sm_{major}{minor}", 4, columns=columns), "plain", 4,
                                       columns=columns) for columns in mma_layout.COLUMN_MAPS}
    if (major, minor) == (9, 0):  # the natural map's dequantization (its build is sm_90a's: wgmma)
        natural = mma_gemv.cached_cubin("sm_90", 4, columns="natural", wg=True)
        gemvs["natural"] = mma_gemv.MmaGemv(natural, "wg", 4, columns="natural")
    for n, k in QWEN3_8B + [(96, 384), (32, 640)]:  # (32, 640): 10 blocks, the staged form's last warp has 2
        _, packed, scales, row_scale, _ = problem(1, n, k, dtype=torch.bfloat16, seed=n + 1, device="cuda")
        scales.view(torch.uint8)[0, :3] = torch.tensor([0, 0x7E, 0x01], dtype=torch.uint8)  # 0, 448, subnormal
        want = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
        dequantize_weight(packed, scales, row_scale, want)
        assert torch.equal(want, (reference.dequantize_unscaled(packed, scales) * row_scale[:, None]).bfloat16())
        for (columns, gemv), order in ((c, o) for c in gemvs.items() for o in mma_layout.LAYOUTS):
            for pairs in (0, n // 32):
                rows = mma_layout.pair_rows(n).cuda() if pairs else torch.arange(n, device="cuda")
                words, codes = mma_layout.in_order(*mma_layout.repack(packed[rows], scales[rows], columns), order)
                for form in mma_gemv.DEQUANTS:
                    got = torch.full((n, k), float("nan"), dtype=torch.bfloat16, device="cuda")
                    gemv.dequantize(words, codes, row_scale[rows].contiguous(), got, pair_tiles=pairs, form=form)
                    torch.cuda.synchronize()
                    assert torch.equal(got, want), (n, k, columns, order, pairs, form)


@pytest.mark.gpu
def test_cuda_mma_past_sixteen_rows_equals_the_reference_eager_and_in_a_graph_with_the_codes_freed():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from functools import partial

    from nvfp4_helpers import replay_matches_eager

    kernel = select_kernel(NVFP4Options(kernel="mma"), "cuda", False, torch.bfloat16)
    assert kernel.dequant_rows == 64 and kernel.release_codes
    for n, k in QWEN3_8B:
        layer, x, packed, scales, bias = layer_of(n, k, seed=n, rows=300, device="cuda")
        assert kernel.prepare_linear(layer, packed, scales) is True
        assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, (17, 40, 63, 64, 300))
        for rows in (40, 300):
            static = x[:rows].contiguous()
            assert replay_matches_eager(partial(kernel.linear, layer, static, bias, None), static), (n, k, rows)
