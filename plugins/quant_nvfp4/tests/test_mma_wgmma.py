"""The wgmma forms of the MMA GEMV (``mma_gemv.WG_FORMS``, built by ``build_cubin(wg=True)``):
a block one warpgroup, x loaded once a block into shared memory and read there by ``wgmma``.
Their names and where a tilings file may name them (CPU), and their sums against the reference
(an sm_90 GPU)."""

from __future__ import annotations

import pytest
import torch
from test_mma_kernel import _launch
from test_triton_gemm import problem

from hinge_nvfp4 import mma_gemv, mma_layout, mma_tiling, reference


def test_the_wgmma_forms_take_one_warp_a_tile_and_have_a_sixteen_row_kernel():
    assert mma_gemv.kernel_name("wg") == "nvfp4_mma_gemv_wg"
    assert mma_gemv.kernel_name("wg_bulk", rows=mma_gemv.MAX_ROWS) == "nvfp4_mma_gemv_wg_bulk_r16"
    with pytest.raises(ValueError, match="the wg form runs one warp a tile and one tile a warp"):
        mma_gemv.kernel_name("wg", 4)
    with pytest.raises(ValueError, match="the wg_bulk form runs one warp a tile and one tile a warp"):
        mma_gemv.kernel_name("wg_bulk", 1, mma_gemv.MAX_ROWS, 2)


def test_a_tilings_file_may_name_a_wgmma_form_at_one_warp_a_tile_for_any_rows():
    entry = {"splits": 4, "kwarps": 1, "stages": 4, "form": "wg", "r16": None}
    plan = mma_tiling.tiling(6144, 4096, 132, {"6144x4096": entry})
    assert (plan.form, plan.kwarps, plan.splits, plan.rows16) == ("wg", 1, 4, None)
    sixteen = {"splits": 1, "kwarps": 4, "stages": 4, "r16": {"kwarps": 1, "form": "wg_bulk", "from": 1}}
    assert mma_tiling.tiling(6144, 4096, 132, {"6144x4096": sixteen}).rows16 == mma_tiling.Rows16(1, "wg_bulk", 1, 1)
    with pytest.raises(ValueError, match=r"forms .* \(or wg, wg_bulk at one warp a tile\)"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**entry, "kwarps": 4}})
    with pytest.raises(ValueError, match=r"\(or wg, wg_bulk at one warp and one tile\)"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**sixteen, "r16": {"kwarps": 2, "form": "wg"}}})


def test_the_wgmma_build_is_refused_for_a_card_other_than_hopper_naming_it():
    with pytest.raises(ValueError, match="the wgmma forms are built for sm_90a .*, not sm_100"):
        mma_gemv.build_cubin("sm_100", wg=True)


def _sm90() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma is sm_90a's)")


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
@pytest.mark.parametrize("form", sorted(mma_gemv.WG_FORMS))
def test_cuda_a_wgmma_form_equals_the_reference_in_every_layout_split_and_row_count_eager_and_in_a_graph(form, columns):
    # qkv in 4 splits, down in 8; 3 tiles (the block's fourth warp past N: it reads the last
    # tile's weights and drops its sums) of 20 supersteps in splits of 8, 8, 4; 25 tiles of 2
    # supersteps in one split. 1 .. 8 rows: the m64n8 kernel, 9 .. 16 the m64n16 one
    _sm90()
    for pdl in (False, True):
        cubin = mma_gemv.cached_cubin("sm_90", 4, pdl=pdl, columns=columns, wg=True)
        gemv = mma_gemv.MmaGemv(cubin, form, 4, 1, pdl, columns=columns)
        for n, k, per_split in ((6144, 4096, 64), (4096, 12288, 96), (48, 2560, 64), (400, 256, 16)):
            x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=k + pdl, device="cuda")
            gemv.reserve_counters(n // 16, torch.device("cuda"))
            for order in mma_layout.LAYOUTS:
                weight = (*mma_layout.in_order(*mma_layout.repack(packed, scales, columns), order), row_scale, bias)
                for rows in (1, 3, 8, 9, 16):
                    xr = x[:rows].contiguous()
                    got = _launch(gemv, xr, weight, per_split)
                    want = reference.linear(xr, packed, scales, row_scale, bias)
                    err = (got.float() - want.float()).abs().max() / want.float().abs().max()
                    assert err < 1e-2, (form, columns, pdl, n, k, order, rows, float(err))
            static = x[:13].contiguous()  # the 16-row kernel, captured, over new x each replay
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = _launch(gemv, static, weight, per_split)
            for _ in range(2):
                static.copy_(torch.randn_like(static))
                graph.replay()
                torch.cuda.synchronize()
                assert torch.equal(captured, _launch(gemv, static, weight, per_split)), (form, pdl, n, k)


@pytest.mark.gpu
@pytest.mark.parametrize("form", sorted(mma_gemv.WG_FORMS))
def test_cuda_a_gated_wgmma_gemv_gives_the_bits_of_its_gemv_then_silu_mul(form):
    # gate_up's shape in one split (a pair's tiles meet in the block) and a small one in 3 splits
    # (through part and the pair counters)
    _sm90()
    from hinge.layers.fast_triton.silu_mul import silu_mul

    cubin = mma_gemv.cached_cubin("sm_90", 4, pdl=True, columns="coalesced", wg=True)
    gemv = mma_gemv.MmaGemv(cubin, form, 4, 1, True, columns="coalesced")
    for n, k, per_split in ((24576, 4096, 256), (192, 2560, 64)):
        x, packed, scales, row_scale, _ = problem(16, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        order = mma_layout.pair_rows(n).cuda()
        words, codes = mma_layout.repack(packed[order], scales[order], "coalesced")
        gemv.reserve_counters(n // 16 + n // 32, torch.device("cuda"))
        for rows in (1, 8, 11, 16):
            xr = x[:rows].contiguous()
            plain = _launch(gemv, xr, (words, codes, row_scale[order], None), per_split, paired=True)
            want = reference.linear(xr, packed, scales, row_scale, None)
            err = (plain.float() - want.float()).abs().max() / want.float().abs().max()
            assert err < 1e-2, (form, n, k, rows, float(err))
            gated = _launch(gemv, xr, (words, codes, row_scale[order], None), per_split, paired=True, gated=True)
            assert torch.equal(gated, silu_mul(plain)), (form, n, k, rows)
