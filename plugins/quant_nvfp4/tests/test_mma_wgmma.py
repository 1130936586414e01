"""The wgmma forms of the MMA GEMV (``mma_gemv.WG_FORMS``, built by ``build_cubin(wg=True)``):
a block one warpgroup, x loaded once a block into shared memory and read there by ``wgmma``; in
the natural column map's build, x copied there as it lies and K shared by 2 or 4 warpgroups.
Their names and where a tilings file may name them (CPU), their SASS (nvcc), and their sums
against the reference (an sm_90 GPU)."""

from __future__ import annotations

import pytest
import torch
from test_mma_kernel import _launch
from test_triton_gemm import problem

from hinge_nvfp4 import format as fp4
from hinge_nvfp4 import mma_gemv, mma_layout, mma_tiling, reference


def test_the_wgmma_forms_take_a_warp_a_warpgroup_one_tile_a_warp_and_have_a_sixteen_row_kernel():
    assert mma_gemv.kernel_name("wg") == "nvfp4_mma_gemv_wg"
    assert mma_gemv.kernel_name("wg_bulk", rows=mma_gemv.MAX_ROWS) == "nvfp4_mma_gemv_wg_bulk_r16"
    assert mma_gemv.kernel_name("wg", 2) == "nvfp4_mma_gemv_wg_kw2"
    assert mma_gemv.kernel_name("wg_bulk", 4, mma_gemv.MAX_ROWS) == "nvfp4_mma_gemv_wg_bulk_kw4_r16"
    with pytest.raises(ValueError, match="the wg form runs 1, 2, 4 warps a tile .* not 8 warps a tile"):
        mma_gemv.kernel_name("wg", 8)
    with pytest.raises(ValueError, match="the wg_bulk form runs 1, 2, 4 warps a tile .* 2 tiles a warp"):
        mma_gemv.kernel_name("wg_bulk", 1, mma_gemv.MAX_ROWS, 2)
    # a block is kwarps warpgroups of four tiles, from a cubin of WARPS warps whatever kwarps
    assert [mma_gemv.block_warps(kw, "wg") for kw in mma_gemv.WG_KWARPS] == [4, 8, 16]
    assert [mma_gemv.cubin_warps(kw, "wg_bulk") for kw in mma_gemv.WG_KWARPS] == [4, 4, 4]
    assert (mma_gemv.block_warps(8), mma_gemv.cubin_warps(8), mma_gemv.block_warps(4)) == (8, 8, 4)


def test_the_natural_map_is_read_by_the_wgmma_forms_alone_which_share_k_in_warpgroups_there_alone():
    mma_gemv.check_columns("wg", 4, "natural", 4)
    mma_gemv.check_columns("wg_bulk", 1, "coalesced")
    with pytest.raises(ValueError, match="natural column map is read by the wgmma forms alone .*not plain"):
        mma_gemv.check_columns("plain", 1, "natural")
    with pytest.raises(ValueError, match="wg form's warpgroups share K .2 warps a tile. in the natural column map alone"):
        mma_gemv.check_columns("wg", 2, "coalesced")
    with pytest.raises(ValueError, match="no column map 'rows'"):
        mma_gemv.check_columns("wg", 1, "rows")
    # a block's rings fit a Hopper block's 227 KiB: four warpgroups in rings of 4, not 8
    assert mma_gemv.wg_shared_bytes(4, 4, 16) == 4 * 4 * (4 * 1160 + 2 * 2048 + 8) <= mma_gemv.WG_MAX_SHARED
    assert mma_gemv.wg_shared_bytes(1, 4, 8) == 4 * (4 * 1160 + 2048 + 8)
    with pytest.raises(ValueError, match="279808 bytes .* more than a Hopper block's 232448: take rings of at most 6"):
        mma_gemv.check_columns("wg", 4, "natural", 8)
    # x copied by TMA: into the natural map's stages alone
    mma_gemv.check_columns("wg_bulk_tma", 4, "natural", 4)
    assert mma_gemv.kernel_name("wg_bulk_tma", 2, 16) == "nvfp4_mma_gemv_wg_bulk_tma_kw2_r16"
    with pytest.raises(ValueError, match="wg_tma form copies x by TMA into the natural map's stages, not coalesced's: "
                                         "repack in natural, or name wg"):
        mma_gemv.check_columns("wg_tma", 1, "coalesced")
    with pytest.raises(ValueError, match="a natural build holds the wgmma forms alone .*x_once"):
        mma_gemv.build_cubin("sm_90", columns="natural", wg=True, x_once=True)


def test_a_tilings_file_may_name_a_wgmma_form_at_one_warp_a_tile_for_any_rows():
    entry = {"splits": 4, "kwarps": 1, "stages": 4, "form": "wg", "r16": None}
    plan = mma_tiling.tiling(6144, 4096, 132, {"6144x4096": entry})
    assert (plan.form, plan.kwarps, plan.splits, plan.rows16) == ("wg", 1, 4, None)
    sixteen = {"splits": 1, "kwarps": 4, "stages": 4, "r16": {"kwarps": 1, "form": "wg_bulk", "from": 1}}
    assert mma_tiling.tiling(6144, 4096, 132, {"6144x4096": sixteen}).rows16 == mma_tiling.Rows16(1, "wg_bulk", 1, 1)
    with pytest.raises(ValueError, match=r"forms .* \(or wg, wg_bulk, wg_tma, wg_bulk_tma at 1, 2, 4 warps a tile\)"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**entry, "kwarps": 8, "stages": 4}})
    with pytest.raises(ValueError, match=r"\(or wg, wg_bulk, wg_tma, wg_bulk_tma at one tile a warp\)"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**sixteen, "r16": {"kwarps": 2, "form": "wg", "tiles": 2}}})
    with pytest.raises(ValueError, match=r"6144x4096 .*warpgroups share K \(4 warps a tile\) in the natural"):
        mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**entry, "kwarps": 4}})


def test_a_tilings_file_may_name_the_natural_map_for_wgmma_launches_alone_at_any_row_count():
    entry = {"splits": 1, "kwarps": 4, "stages": 4, "form": "wg_bulk", "columns": "natural",
             "r16": {"kwarps": 2, "form": "wg"}, "few": {"upto": 1, "form": "wg", "kwarps": 1}}
    plan = mma_tiling.tiling(6144, 4096, 132, {"6144x4096": entry})
    assert (plan.form, plan.kwarps, plan.columns, plan.rows16) == ("wg_bulk", 4, "natural", mma_tiling.Rows16(2, "wg", 1))
    assert (plan.few.plan.form, plan.few.plan.kwarps, plan.few.plan.columns) == ("wg", 1, "natural")
    without = {key: value for key, value in entry.items() if key not in ("r16", "few")}
    for wrong, why in (({"form": "bulk"}, "read by the wgmma forms alone .*not bulk"),
                       ({"r16": {"kwarps": 4, "form": "plain"}}, "read by the wgmma forms alone .*not plain"),
                       ({"few": {"form": "xring"}}, "read by the wgmma forms alone .*not xring"),
                       ({"stages": 8}, "take rings of at most 6"),
                       ({"columns": "coalesced"}, "share K \\(4 warps a tile\\) in the natural column map alone")):
        with pytest.raises(ValueError, match=why):
            mma_tiling.tiling(6144, 4096, 132, {"6144x4096": {**without, **wrong}})


def test_the_wgmma_build_is_refused_for_a_card_other_than_hopper_naming_it():
    with pytest.raises(ValueError, match="the wgmma forms are built for sm_90a .*, not sm_100"):
        mma_gemv.build_cubin("sm_100", wg=True)


def test_a_natural_tilings_file_runs_a_layer_through_the_natural_repack_at_every_row_count(tmp_path, monkeypatch):
    # the engine's kernel with the natural map's launches (emulated): the layer repacked in it,
    # its GEMVs of 1 .. 16 rows and its prefill's weight (dequantized from the repack) equal the
    # reference
    import json

    from test_mma_kernel import EmulatedLauncher, assert_rows_match_the_reference, layer_of

    from hinge_nvfp4.kernels import MmaKernel

    entry = {"splits": 2, "kwarps": 2, "stages": 4, "form": "wg", "columns": "natural",
             "r16": {"kwarps": 4, "form": "wg_bulk_tma"}}
    (tmp_path / "plan.json").write_text(json.dumps({"128x4096": entry}))
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(tmp_path / "plan.json"))
    kernel = MmaKernel(gemv=EmulatedLauncher("natural"), num_sms=132, dequant_rows=32)
    layer, x, packed, scales, bias = layer_of(128, 4096, rows=40)
    kernel.prepare_linear(layer, packed, scales)
    assert torch.equal(layer.nvfp4_mma_words, mma_layout.repack(packed, scales, "natural")[0])
    assert [key[1:3] + key[5:6] for key in kernel._gemvs] == [(2, "wg", "natural"), (4, "wg_bulk_tma", "natural")]
    assert_rows_match_the_reference(kernel, layer, x, packed, scales, bias, (1, 3, 8, 9, 16, 40))
    assert [call[0] for call in kernel._gemvs[next(iter(kernel._gemvs))].calls][-1] == "dequantize"
    with pytest.raises(ValueError, match="stood in computes column map 'coalesced', the layer is repacked in 'natural'"):
        MmaKernel(gemv=EmulatedLauncher("coalesced"), num_sms=132).prepare_linear(layer, packed, scales)


#: bf16 1.0's bits: x element number i of a tracer problem is the bf16 of bits ONE + i
ONE = 0x3F80


def tracer(n: int, rows: int = 16) -> tuple[torch.Tensor, ...]:
    """x (rows, n) bf16 whose every element names itself (element i, row-major, has the bits ONE +
    i: 1.0 up to 2^64, no two alike) and the (n, n) identity weight in NVFP4 (code 1.0, scales
    1.0, row_scale 1.0): the GEMV's out[i, r] is x[i, r] bit for bit (one product, exact), and an
    element that is not names the x it read."""
    if rows * n > 0x7FFF - ONE:
        raise ValueError(f"a tracer names at most {0x7FFF - ONE} elements, not {rows} x {n}")
    x = (ONE + torch.arange(rows * n, dtype=torch.int32)).to(torch.int16).view(torch.bfloat16).reshape(rows, n)
    codes = torch.zeros(n, n, dtype=torch.uint8)
    codes.diagonal().fill_(fp4.E2M1_VALUES.index(1.0))
    scales = torch.ones(n, n // fp4.BLOCK).to(torch.float8_e4m3fn)
    return x, fp4.pack(codes), scales, torch.ones(n)


def misreads(got: torch.Tensor, x: torch.Tensor, most: int = 8) -> list[str]:
    """Where ``got`` (a tracer problem's output) is not x: each such out[i, r] as the x element
    its bits name (``x[i', c']``), or its value where it names none (a sum, a zero)."""
    n, got = x.shape[1], got.cpu()
    wrong = (got.view(torch.int16) != x.cpu().view(torch.int16)).nonzero().tolist()
    said = []
    for i, r in wrong[:most]:
        bits = int(got[i, r].view(torch.int16)) - ONE
        read = f"x[{bits // n}, {bits % n}]" if 0 <= bits < x.numel() else f"{float(got[i, r])}"
        said.append(f"out[{i}, {r}] <- {read}")
    return said + ([f"... {len(wrong) - most} more"] if len(wrong) > most else [])


@pytest.mark.parametrize("columns", mma_layout.REPACK_MAPS)
def test_a_tracer_problem_gives_x_back_bit_for_bit_in_every_column_map_and_names_a_misread(columns):
    x, packed, scales, row_scale = tracer(256)
    assert len(set(x.view(torch.int16).flatten().tolist())) == x.numel()
    assert torch.equal(reference.linear(x, packed, scales, row_scale, None).view(torch.int16), x.view(torch.int16))
    words, codes = mma_layout.repack(packed, scales, columns)
    assert torch.equal(mma_layout.emulate(words, codes, x, columns), x.double())
    wrong = x.clone()
    wrong[3, 7], wrong[15, 255] = x[5, 2], 0.0
    assert misreads(wrong, x) == ["out[3, 7] <- x[5, 2]", "out[15, 255] <- 0.0"]
    with pytest.raises(ValueError, match="at most 16511 elements, not 16 x 2048"):
        tracer(2048)


def _sm90() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma is sm_90a's)")


#: (N, K, groups a split): qkv in 4 splits, down in 8; 3 tiles (the block's fourth warp past N: it
#: reads the last tile's weights and drops its sums) of 20 supersteps in splits of 8, 8, 4; 25
#: tiles of 2 supersteps in one split (past one warp a tile, warpgroups with no superstep)
SHAPES = ((6144, 4096, 64), (4096, 12288, 96), (48, 2560, 64), (400, 256, 16))


def _equals_the_reference(gemv, shapes, columns, seed, label) -> None:
    """``gemv`` over each of ``shapes`` in every memory order at 1 / 3 / 8 / 9 / 16 rows within 1%
    of the reference, and a captured 13-row launch equal to the eager one over new x."""
    for n, k, per_split in shapes:
        x, packed, scales, row_scale, bias = problem(16, n, k, dtype=torch.bfloat16, seed=k + seed, device="cuda")
        gemv.reserve_counters(n // 16, torch.device("cuda"))
        for order in mma_layout.LAYOUTS:
            weight = (*mma_layout.in_order(*mma_layout.repack(packed, scales, columns), order), row_scale, bias)
            for rows in (1, 3, 8, 9, 16):
                xr = x[:rows].contiguous()
                got = _launch(gemv, xr, weight, per_split)
                want = reference.linear(xr, packed, scales, row_scale, bias)
                err = (got.float() - want.float()).abs().max() / want.float().abs().max()
                assert err < 1e-2, (*label, n, k, order, rows, float(err))
        static = x[:13].contiguous()  # the 16-row kernel, captured, over new x each replay
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = _launch(gemv, static, weight, per_split)
        for _ in range(2):
            static.copy_(torch.randn_like(static))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(captured, _launch(gemv, static, weight, per_split)), (*label, n, k)


#: the wgmma forms of every build (the TMA forms are the natural build's alone)
STAGED = sorted(set(mma_gemv.WG_FORMS) - set(mma_gemv.WG_TMA_FORMS))


@pytest.mark.gpu
@pytest.mark.parametrize("columns", mma_layout.COLUMN_MAPS)
@pytest.mark.parametrize("form", STAGED)
def test_cuda_a_wgmma_form_equals_the_reference_in_every_layout_split_and_row_count_eager_and_in_a_graph(form, columns):
    # 1 .. 8 rows: the m64n8 kernel, 9 .. 16 the m64n16 one
    _sm90()
    for pdl in (False, True):
        cubin = mma_gemv.cached_cubin("sm_90", 4, pdl=pdl, columns=columns, wg=True)
        gemv = mma_gemv.MmaGemv(cubin, form, 4, 1, pdl, columns=columns)
        _equals_the_reference(gemv, SHAPES, columns, pdl, (form, columns, pdl))


@pytest.mark.gpu
@pytest.mark.parametrize("kwarps", mma_gemv.WG_KWARPS)
@pytest.mark.parametrize("form", sorted(mma_gemv.WG_FORMS))
def test_cuda_a_natural_wgmma_form_equals_the_reference_at_one_two_and_four_warpgroups_a_block(form, kwarps):
    # x copied into the stages as it lies (by every thread's cp.async, or by TMA), K shared by the
    # block's warpgroups (and by splits); qkv and down in one split too (K all in the block); PDL
    # and not
    _sm90()
    for pdl in (False, True):
        cubin = mma_gemv.cached_cubin("sm_90", 4, pdl=pdl, columns="natural", trigger="start" if pdl else "read",
                                      row_scale="wait" if pdl else "end", wg=True)
        gemv = mma_gemv.MmaGemv(cubin, form, 4, kwarps, pdl, columns="natural")
        shapes = SHAPES + ((6144, 4096, 256), (4096, 12288, 768))
        _equals_the_reference(gemv, shapes, "natural", pdl, (form, kwarps, pdl))


@pytest.mark.gpu
@pytest.mark.parametrize("form, columns, kwarps", [(form, columns, 1) for form in STAGED for columns in ("coalesced",
    "contiguous")] + [(form, "natural", kwarps) for form in sorted(mma_gemv.WG_FORMS) for kwarps in mma_gemv.WG_KWARPS])
def test_cuda_every_output_of_a_wgmma_form_reads_the_x_its_row_and_column_name(form, columns, kwarps):
    # the tracer problem (the identity weight, x elements that name themselves): out is x bit for
    # bit at 1 .. 16 rows, in one split and in two, eager; a failure names what each wrong output
    # read (an x element: a layout's, a descriptor's or a swizzle's mistake; a sum or zero: a
    # stage read before it landed or a row past m). The staged forms (measured correct on an
    # H100, thirty-fifth session) are the probe's own control
    _sm90()
    cubin = mma_gemv.cached_cubin("sm_90", 4, pdl=True, columns=columns, trigger="start", row_scale="wait", wg=True)
    gemv = mma_gemv.MmaGemv(cubin, form, 4, kwarps, True, columns=columns)
    x, packed, scales, row_scale = (t.cuda() for t in tracer(512))
    words, codes = mma_layout.repack(packed, scales, columns)
    gemv.reserve_counters(512 // 16, torch.device("cuda"))
    for per_split in (32, 16):
        for rows in (1, 3, 8, 9, 16):
            got = _launch(gemv, x[:rows].contiguous(), (words, codes, row_scale, None), per_split)
            torch.cuda.synchronize()
            assert not misreads(got, x[:rows]), (form, columns, kwarps, per_split, rows, misreads(got, x[:rows]))


@pytest.mark.gpu
@pytest.mark.parametrize("form, columns, kwarps", [(form, "coalesced", 1) for form in STAGED] + [
    (form, "natural", kwarps) for form in sorted(mma_gemv.WG_FORMS) for kwarps in (1, 2)])
def test_cuda_a_gated_wgmma_gemv_gives_the_bits_of_its_gemv_then_silu_mul(form, columns, kwarps):
    # gate_up's shape in one split (a pair's tiles meet in the block) and a small one in 3 splits
    # (through part and the pair counters)
    _sm90()
    from hinge.layers.fast_triton.silu_mul import silu_mul

    cubin = mma_gemv.cached_cubin("sm_90", 4, pdl=True, columns=columns, wg=True)
    gemv = mma_gemv.MmaGemv(cubin, form, 4, kwarps, True, columns=columns)
    for n, k, per_split in ((24576, 4096, 256), (192, 2560, 64)):
        x, packed, scales, row_scale, _ = problem(16, n, k, dtype=torch.bfloat16, seed=n, device="cuda")
        order = mma_layout.pair_rows(n).cuda()
        words, codes = mma_layout.repack(packed[order], scales[order], columns)
        gemv.reserve_counters(n // 16 + n // 32, torch.device("cuda"))
        for rows in (1, 8, 11, 16):
            xr = x[:rows].contiguous()
            plain = _launch(gemv, xr, (words, codes, row_scale[order], None), per_split, paired=True)
            want = reference.linear(xr, packed, scales, row_scale, None)
            err = (plain.float() - want.float()).abs().max() / want.float().abs().max()
            assert err < 1e-2, (form, columns, kwarps, n, k, rows, float(err))
            gated = _launch(gemv, xr, (words, codes, row_scale[order], None), per_split, paired=True, gated=True)
            assert torch.equal(gated, silu_mul(plain)), (form, columns, kwarps, n, k, rows)
