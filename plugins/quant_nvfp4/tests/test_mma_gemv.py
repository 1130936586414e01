"""The tensor-core NVFP4 GEMV on the CPU: its weight layout (``hinge_nvfp4.mma_layout``: the
repack and the fragment decode, emulated as the kernel computes, give the reference GEMV in
float64 from the format's definition; exact scale multipliers; zero, negative and NaN scales;
memory orders) and its build (``hinge_nvfp4.mma_gemv``: where nvcc is installed, every form
compiles for sm_90 with no spills and its MMAs and copies in its loops). On a GPU:
test_mma_kernel.py's ``gpu`` test."""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import re
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from hinge_nvfp4 import mma_gemv as nvfp4_mma
from hinge_nvfp4 import mma_layout as layout

#: the register form and its memory side alone, built beside the ring forms (their own tests)
one_set = nvfp4_mma.ONE_SET | nvfp4_mma.REGS_DIAGNOSTICS
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def weights(n, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    # every e4m3 magnitude but NaN (0x7F), subnormal scales included
    scales = torch.randint(0, 0x7F, (n, k // 16), generator=gen, dtype=torch.uint8)
    return packed, scales


def reference(packed, scales, x):
    codes = layout.nibbles(packed)
    value = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    scale = scales.view(torch.float8_e4m3fn).double().repeat_interleave(16, dim=1)
    return x.double() @ (value * scale).t()


@pytest.mark.parametrize("columns", layout.REPACK_MAPS)
@pytest.mark.parametrize("m", [1, 3, 8])
def test_the_repacked_fragments_decoded_as_the_kernel_does_give_the_reference_gemv(m, columns):
    packed, scales = weights(48, 256, seed=m)
    x = torch.randn(m, 256, generator=torch.Generator().manual_seed(9)).bfloat16()
    words, codes = layout.repack(packed, scales, columns)
    assert words.shape == (3, 2, 2, 32, 4) and words.dtype == torch.int32
    assert codes.shape == (3, 2, 32) and codes.dtype == torch.int32
    torch.testing.assert_close(layout.emulate(words, codes, x, columns), reference(packed, scales, x),
                               rtol=1e-12, atol=1e-12)


def test_a_repack_read_in_the_other_column_map_is_a_different_gemv():
    # the maps are not interchangeable: the emulation (as the kernel built for the other map
    # reads it) is far from the reference
    packed, scales = weights(16, 128, seed=5)
    x = torch.randn(1, 128, generator=torch.Generator().manual_seed(9)).bfloat16()
    for made, read in (("contiguous", "coalesced"), ("coalesced", "contiguous"), ("coalesced", "natural"),
                       ("natural", "coalesced")):
        words, codes = layout.repack(packed, scales, made)
        want = reference(packed, scales, x)
        assert (layout.emulate(words, codes, x, read) - want).abs().max() > 0.1 * want.abs().max()


def test_the_coalesced_map_gives_a_rows_four_lanes_64_contiguous_bytes_a_load_and_lane_pairs_their_groups():
    # column_index[t, u, c]: lane t's load q (MMAs 2q, 2q + 1) is columns 32q + 8t .. + 7, the four
    # lanes of a row 32q .. 32q + 31 together; lanes 2p, 2p + 1 lie in the same four scale groups
    # (p + 2v); the contiguous map: lane t's 32 columns in one run, in groups 2t, 2t + 1
    idx = layout.column_index("coalesced")
    for q in range(4):
        load = idx[:, 2 * q:2 * q + 2, :].reshape(4, 8)
        assert all(load[t].tolist() == list(range(32 * q + 8 * t, 32 * q + 8 * t + 8)) for t in range(4))
    groups = [set((idx[t] // 16).flatten().tolist()) for t in range(4)]
    assert groups[0] == groups[1] == {0, 2, 4, 6} and groups[2] == groups[3] == {1, 3, 5, 7}
    contiguous = layout.column_index("contiguous")
    assert all(contiguous[t].flatten().tolist() == list(range(32 * t, 32 * t + 32)) for t in range(4))
    with pytest.raises(ValueError, match="no column map 'rows' of the MMA GEMV; the maps are contiguous, coalesced, natural"):
        layout.repack(*weights(16, 128), "rows")


def test_the_natural_map_makes_each_k_half_of_an_mma_eight_contiguous_columns_in_its_own_group():
    # what a copy of x straight into wgmma's B needs: MMA u's k half h (lanes t = 0 .. 3, two
    # columns each, in k order) is columns 16u + 8h .. + 7, so a core-matrix row is 16 contiguous
    # bytes of x; MMA u is scale group u; the wgmma forms alone are built for it
    idx = layout.column_index("natural")
    for u in range(8):
        for h in range(2):
            assert idx[:, u, 2 * h:2 * h + 2].flatten().tolist() == list(range(16 * u + 8 * h, 16 * u + 8 * h + 8))
    assert all(set((idx[t, u] // 16).tolist()) == {u} for t in range(4) for u in range(8))
    with pytest.raises(ValueError, match="a natural build holds the wgmma forms alone"):
        nvfp4_mma.build_cubin("sm_90", columns="natural")
    with pytest.raises(ValueError, match="built for the column maps contiguous, coalesced, natural, not 'rows'"):
        nvfp4_mma.build_cubin("sm_90", columns="rows")


@pytest.mark.parametrize("columns", layout.REPACK_MAPS)
def test_every_code_decodes_to_its_e2m1_value_in_its_fragment_place(columns):
    # one tile, one superstep, unit scales: element (r, c) = (r + c) % 16
    r, c = torch.meshgrid(torch.arange(16), torch.arange(128), indexing="ij")
    codes = (r + c) % 16
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    ones = torch.full((16, 8), 0x38, dtype=torch.uint8)  # e4m3 1.0
    words, scale_codes = layout.repack(packed, ones, columns)
    a = layout.dense_weight(words, scale_codes, columns) * 256
    want = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    assert torch.equal(a.abs(), want.abs())
    assert torch.equal(torch.signbit(a), codes >= 8)  # -0.0 for code 8 too


def test_the_superstep_major_and_interleaved_copies_are_the_same_blocks_at_other_strides():
    packed, scales = weights(48, 384, seed=4)
    words, codes = layout.repack(packed, scales)  # 3 tiles, 3 supersteps
    # strides in 16-byte units: a code block is 64 of them, a scale block 8
    assert layout.block_strides(words, codes) == (3 * 64, 64, 3 * 8, 8)
    sw, sc = layout.superstep_major(words), layout.superstep_major(codes)
    assert torch.equal(sw, words) and torch.equal(sc, codes)
    assert layout.block_strides(sw, sc) == (64, 3 * 64, 8, 3 * 8)
    iw, ic = layout.interleave(words, codes)
    assert torch.equal(iw, words) and torch.equal(ic, codes)
    assert iw.untyped_storage().data_ptr() == ic.untyped_storage().data_ptr()
    assert ic.data_ptr() - iw.data_ptr() == 1024  # a block's scales right after its codes
    assert layout.block_strides(iw, ic) == (3 * 72, 72, 3 * 72, 72)
    assert layout.block_strides(sw, codes) == (64, 3 * 64, 3 * 8, 8)  # orders may differ
    with pytest.raises(ValueError, match="not repack's blocks, contiguous and 16-byte aligned"):
        layout.block_strides(words.transpose(2, 3), codes)
    shifted = torch.zeros(codes.numel() + 1, dtype=torch.int32)[1:].view(codes.shape)  # 4 bytes off
    with pytest.raises(ValueError, match="16-byte aligned"):
        layout.block_strides(words, shifted)


def test_the_fragment_bits_are_every_bit_of_a_word_once():
    places = sorted(p for halves in layout.FRAGMENT_BITS for bits in halves for p in bits)
    assert places == list(range(32))


def test_every_e4m3_magnitude_becomes_an_exact_multiplier_of_two_to_the_118():
    bits = torch.arange(0x7F, dtype=torch.uint8)  # every magnitude but NaN, subnormals included
    value = bits.view(torch.float8_e4m3fn).double()
    mult = layout._multiplier_values(layout.encode_scales(bits))
    nonzero = value > 0
    assert torch.equal(mult[nonzero], value[nonzero] * 2.0**118)
    assert torch.equal(layout.encode_scales(bits | 0x80), layout.encode_scales(bits))


def test_zero_and_negative_scales_give_the_reference_and_a_nan_scale_is_refused_by_place():
    packed, scales = weights(16, 128, seed=5)
    scales[3, 2] = 0x00  # zero: the block's weights are 0 whatever its codes
    scales[7, 5] = 0x38 | 0x80  # -1.0
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(2)).bfloat16()
    words, codes = layout.repack(packed, scales)
    torch.testing.assert_close(layout.emulate(words, codes, x), reference(packed, scales, x),
                               rtol=1e-12, atol=1e-12)
    scales[9, 4] = 0x7F
    with pytest.raises(ValueError, match="row 9, group 4 is NaN"):
        layout.repack(packed, scales)


def test_shapes_the_kernel_cannot_tile_are_refused_naming_them():
    with pytest.raises(ValueError, match="N % 16 == 0 and K % 128 == 0, got 24 x 64"):
        layout.repack_codes(torch.zeros(24, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="got 16 x 64"):
        layout.repack_scales(torch.zeros(16, 4, dtype=torch.uint8))


needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None or not __import__("importlib").util.find_spec("triton"),
    reason="needs nvcc (the CUDA toolkit) and Triton's cuobjdump")


def cuobjdump(option: str, cubin: Path) -> str:
    """cuobjdump's output (the toolkit's, else the one Triton ships)."""
    exe = shutil.which("cuobjdump") or str(Path(__import__("triton").__file__).parent
                                           / "backends" / "nvidia" / "bin" / "cuobjdump")
    return subprocess.run([exe, option, str(cubin)], capture_output=True, text=True).stdout


#: every build the SASS tests below ask for, in their order: ``built``'s first call starts them
#: all, as many at once as there are cores (nvcc takes 10-40 s a build on one core; one after the
#: other they were most of the suite's time); a build not listed here is queued when asked
PREBUILT = (
    *({"stages": s, "columns": "contiguous"} for s in (2, 4, 8, 10)),
    {"stages": 4, "columns": "coalesced"},
    *({"stages": s, "warps": nvfp4_mma.WIDE_WARPS} for s in (4, 5)),
    {"stages": 4, "pdl": True},
    *({"stages": 4, "columns": "coalesced", **o}
      for o in ({"pdl": True, "prefetch": "run"}, {"pdl": True}, {"prefetch": "run"})),
    {"stages": 4, "pdl": True, "wait_first": True},
    {"stages": 4, "pdl": True, "no_wait": True},
    {"stages": 4, "pdl": True, "x_once": True},
    {"stages": 4, "pdl": True, "x_same": True},
    {"stages": 4, "pdl": True, "wg": True},
    {"stages": 4, "pdl": True, "wg": True, "columns": "natural"},
    *({"stages": 4, "pdl": True, "columns": "coalesced", "row_scale": r} for r in nvfp4_mma.ROW_SCALE_READS),
    {"stages": 4, "pdl": True, "columns": "coalesced", "trace": True},
    *({"stages": 4, "pdl": True, "trigger": t} for t in nvfp4_mma.TRIGGERS),
    *({"stages": 4, "pdl": True, "columns": "coalesced", "row_scale": "wait", "r16_diag": d} for d in (1, 2)),
)


def built(**options) -> bytes:
    """``nvfp4_mma.build_cubin("sm_90", **options)``, built once a test session for each set of
    options (defaults filled in: the same build asked two ways is one build)."""
    if not _build.cache_info().currsize:  # the first call: every listed build starts
        for listed in PREBUILT:
            _build(build_key(listed))
    return _build(build_key(options)).result()


def build_key(options: dict) -> tuple:
    call = inspect.signature(nvfp4_mma.build_cubin).bind("sm_90", **options)
    call.apply_defaults()
    return tuple(call.arguments.items())


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1)  # nvcc runs outside the GIL


@functools.cache
def _build(key: tuple) -> Future:
    return _pool().submit(nvfp4_mma.build_cubin, **dict(key))


@pytest.fixture(scope="module", autouse=True)
def _no_build_past_the_module():
    """A run of a few of these tests (``-k``) does not wait at exit for builds no test asked for."""
    yield
    if _build.cache_info().currsize:
        _pool().shutdown(wait=False, cancel_futures=True)


def sass_by_function(cubin: Path) -> dict[str, str]:
    """The cubin's SASS, a text a kernel."""
    return {part.split()[0]: part for part in cuobjdump("-sass", cubin).split("Function : ")[1:]}


def built_sass(tmp_path: Path, **options) -> dict[str, str]:
    """``built(**options)``'s SASS, a text a kernel (the cubin written under ``tmp_path``)."""
    cubin = tmp_path / "built.cubin"
    cubin.write_bytes(built(**options))
    return sass_by_function(cubin)


@needs_nvcc
@pytest.mark.parametrize("stages, columns", [(2, "contiguous"), (4, "contiguous"), (8, "contiguous"),
                                             (10, "contiguous"), (4, "coalesced")])
def test_the_kernel_compiles_for_hopper_without_spills_and_with_eight_mmas_a_superstep_a_set(tmp_path, stages, columns):
    """At most 80 registers (6 blocks a multiprocessor; the 16-row kernels 128, 4 blocks), no
    stack; eight MMAs a superstep for each set of eight x rows (the loop unrolled ``stages``
    times); codes and scales copied with cp.async (LDGSTS) and waited on (DEPBAR), a ring of
    ``stages`` supersteps of 1152 bytes for each of its 4 warps in shared memory (and nothing
    more: a tile's warps add their sums and a gated pair exchanges its values in the rings);
    the split reduction's fence and atomic count. The coalesced column map reads a lane pair's
    two scale words in one 8-byte shared load (LDS.64), the contiguous one none."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(built(stages=stages, columns=columns))
    usage = cuobjdump("-res-usage", cubin)
    resources = dict(re.findall(r"Function (\w+):\s+(REG:.*)", usage))
    assert all(resources.pop(name) for name in nvfp4_mma.DEQUANTS.values())  # the weight itself (own test)
    assert all(resources.pop(nvfp4_mma.kernel_name(form, kw)) for form in one_set
               for kw in nvfp4_mma.KWARPS)  # the register form and its memory side (own test)
    forms = nvfp4_mma.KERNELS | nvfp4_mma.DIAGNOSTICS
    names = {nvfp4_mma.kernel_name(form, kw, rows, tiles): (form, kw, rows, tiles) for form in forms
             for kw in nvfp4_mma.KWARPS for rows in (8, 16) for tiles in (1, 2)
             if (rows == 8 or form in nvfp4_mma.KERNELS) and (tiles == 1 or (
                 rows == 16 and form in nvfp4_mma.T2_FORMS and stages <= nvfp4_mma.T2_MAX_STAGES))}
    assert set(resources) == set(names)
    ring_bytes = 4 * stages * (2 * 32 * 16 + 32 * 4)  # + the 1 KiB sm_90 reserves a block
    codes = sass_by_function(cubin)
    for name, (form, kw, rows, tiles) in names.items():
        line = resources[name]
        registers = int(re.search(r"REG:(\d+)", line).group(1))
        # (the arithmetic-alone diagnostic, in 80 registers, spills 16 bytes: its times are an
        # upper bound of the arithmetic's)
        no_stack = "STACK:0" in line or form == "math"
        most = 80 if rows == 8 else 128 if tiles == 1 else 168  # 6, 4, 3 blocks a multiprocessor
        assert 0 < registers <= most and no_stack and "LOCAL:0" in line, line
        bars = 4 * stages * 8 if form == "bulk" else 0  # an mbarrier a slot a warp
        assert f"SHARED:{tiles * ring_bytes + bars + 1024}" in line, (name, line)
        mmas = 0 if form == "ring" else 8 * stages * rows // 8 * tiles  # ring: the memory side alone
        assert codes[name].count("HMMA.16816.F32.BF16") == mmas, name
        copies = codes[name].count("LDGSTS")
        if form == "bulk":  # lane 0's two bulk copies a tile a superstep: the prologue's, the loop's
            assert copies == 0 and codes[name].count("UBLKCP") == 2 * tiles * (2 * stages - 1), name
            assert "SYNCS.PHASECHK" in codes[name] and "SYNCS.ARRIVE" in codes[name], name
        else:
            assert (copies == 3 if form == "math" else copies > 3 * stages) and "DEPBAR" in codes[name], name
        assert "MEMBAR" in codes[name] and re.search(r"\bATOM|\bRED\.", codes[name]), name
        # named barriers: a tile's warps meet to add their sums (kw > 1); a gated pair's two
        # warps meet in the block (kw < 4: two tiles or more a block), the gate one only arriving
        # (two tiles a warp hold a gated pair in one warp: no barrier between warps for it)
        in_block_pair = kw < 4 and tiles == 1
        assert codes[name].count("BAR.SYNC") == (kw > 1) + in_block_pair, name
        assert ("BAR.ARV" in codes[name]) == in_block_pair, name
        assert "ACQBULK" not in codes[name], name  # no griddepcontrol.wait but in a pdl build
        assert ("LDS.64" in codes[name]) == (columns == "coalesced"), name


@needs_nvcc
@pytest.mark.parametrize("stages", [4, 5])
def test_a_build_of_eight_warps_a_block_holds_the_eight_warps_a_tile_kernels_in_as_many_registers(tmp_path, stages):
    """``WIDE_WARPS``: each GEMV form's ``_kw8`` and ``_kw8_r16`` kernels (80 and 128 registers
    at most: 3 and 2 blocks of 256 threads a multiprocessor), no stack, eight rings of ``stages``
    in static shared memory, a named barrier for the tile's warps, no two-tiles kernels; the
    ring diagnostic's ``_kw8`` (copies, no MMAs); the 4-warp kernels are built too (a launcher
    takes any function of its cubin)."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(built(stages=stages, warps=nvfp4_mma.WIDE_WARPS))
    resources = dict(re.findall(r"Function (\w+):\s+(REG:.*)", cuobjdump("-res-usage", cubin)))
    codes = sass_by_function(cubin)
    assert not any(name.endswith("_t2") for name in resources)
    for form in nvfp4_mma.KERNELS:
        for rows, most in ((8, 80), (16, 128)):
            name = nvfp4_mma.kernel_name(form, 8, rows)
            line = resources[name]
            assert int(re.search(r"REG:(\d+)", line).group(1)) <= most and "STACK:0" in line, (name, line)
            ring = 8 * stages * 1152 + (8 * stages * 8 if form == "bulk" else 0) + 1024
            assert f"SHARED:{ring}" in line, (name, line)
            assert codes[name].count("HMMA.16816.F32.BF16") == 8 * stages * rows // 8, name
            assert codes[name].count("BAR.SYNC") == 1 and "BAR.ARV" not in codes[name], name
        assert nvfp4_mma.kernel_name(form, 4) in resources
    ring = nvfp4_mma.kernel_name("ring", 8)  # the memory side alone (nvfp4_launch_chain.py's ring variants)
    assert int(re.search(r"REG:(\d+)", resources[ring]).group(1)) <= 80 and "STACK:0" in resources[ring]
    assert "HMMA" not in codes[ring] and codes[ring].count("LDGSTS") > 3 * stages


@needs_nvcc
def test_the_dequantizing_kernels_read_a_block_in_three_loads_and_write_it_in_sixteen_byte_stores(tmp_path):
    """``DEQUANTS``: no stack, no spills; a lane's two 16-byte code loads and its scale word a
    block, the GEMV's decode (bf16x2 multiplies by the scales: HMUL2, or HFMA2 on the MMA pipe),
    float32 multiplies by the row scale, 64 values to bf16 in 32 conversions, and two rows of four
    16-byte stores a lane (a second copy of the stores for a paired [gate | up]'s rows). The
    staged form: ``DQ_BLOCKS`` blocks a warp, each through 16 rows of 17 16-byte pieces a warp of
    shared memory (eight 16-byte writes a lane, eight reads and stores of whole row pieces)."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(built(stages=4))
    usage = dict(re.findall(r"Function (\w+):\s+(REG:.*)", cuobjdump("-res-usage", cubin)))
    sass = sass_by_function(cubin)
    for form, name in nvfp4_mma.DEQUANTS.items():
        blocks = nvfp4_mma.DQ_BLOCKS if form == "staged" else 1
        shared = 1024 + (4 * 16 * 17 * 16 if form == "staged" else 0)
        line, code = usage[name], sass[name]
        assert "STACK:0" in line and "LOCAL:0" in line and f"SHARED:{shared}" in line, line
        assert code.count("STG.E.128") == 2 * 8 * blocks and not re.search(r"\bSTG\.E(?!\.128)", code)
        assert code.count("LDG.E.128") == 2 * blocks and "HMMA" not in code
        assert len(re.findall(r"\b(HMUL2|HFMA2(\.MMA)?)\.BF16", code)) == 32 * blocks
        assert code.count("F2FP.BF16.F32.PACK") == 32 * blocks
        assert code.count("STS.128") == (8 * blocks if form == "staged" else 0)


@needs_nvcc
def test_a_pdl_build_copies_weights_before_waiting_for_the_kernel_before_and_reads_x_after(tmp_path):
    """Built for programmatic dependent launch, every kernel waits once (griddepcontrol.wait:
    ACQBULK) after its first weight copies and before any load of x, store or atomic; x comes
    through coherent loads (a read-only load, LDG.CONSTANT, was scheduled above the wait)."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(built(stages=4, pdl=True))
    codes = sass_by_function(cubin)
    for name in nvfp4_mma.DEQUANTS.values():  # launched after the kernel before ends
        assert "ACQBULK" not in codes.pop(name)
    for name in (nvfp4_mma.kernel_name(form, kw) for form in one_set for kw in nvfp4_mma.KWARPS):
        assert codes.pop(name).count("ACQBULK") == 1, name  # the register form (own test)
    kernels = 2 * len(nvfp4_mma.KERNELS) + len(nvfp4_mma.DIAGNOSTICS) + len(nvfp4_mma.T2_FORMS)
    assert len(codes) == kernels * len(nvfp4_mma.KWARPS)
    for name, code in codes.items():
        wait = code.index("ACQBULK")
        first_copy = min(code.index(op) for op in ("LDGSTS", "UBLKCP") if op in code)
        assert first_copy < wait and code.count("ACQBULK") == 1, name
        for op in ("LDG.E.128", "STG.", "ATOM", "RED."):
            assert op not in code[:wait], (name, op)
        assert "LDG.E.128.CONSTANT" not in code, name


@needs_nvcc
def test_a_pdl_build_with_prefetch_run_asks_l2_for_the_warps_run_before_its_wait_and_no_other_build_does(tmp_path):
    """``prefetch="run"`` (``PREFETCHES``): in a PDL build every ring form's GEMV issues bulk L2
    prefetches (UBLKPF) of its run past the prologue, all before griddepcontrol.wait (ACQBULK),
    and its copies carry no L2 hint; the register forms, and a build without "run" or without
    PDL, issue none."""
    def sass(**options):
        cubin = tmp_path / "k.cubin"
        cubin.write_bytes(built(stages=4, columns="coalesced", **options))
        return sass_by_function(cubin)

    codes = sass(pdl=True, prefetch="run")
    gemvs = [nvfp4_mma.kernel_name(form, kw, rows) for form in nvfp4_mma.KERNELS for kw in nvfp4_mma.KWARPS
             for rows in (8, 16)]
    for name in gemvs:
        code = codes[name]
        wait = code.index("ACQBULK")
        assert code[:wait].count("UBLKPF") >= 2 and "UBLKPF" not in code[wait:], name
        assert "LTC" not in code, name  # (LDGSTS.E.BYPASS.LTC256B.128: a copy with an L2 hint)
    for name in (nvfp4_mma.kernel_name(form, kw) for form in one_set for kw in nvfp4_mma.KWARPS):
        assert "UBLKPF" not in codes[name], name
    for options in ({"pdl": True}, {"prefetch": "run"}):
        assert not any("UBLKPF" in code for code in sass(**options).values()), options


@needs_nvcc
def test_a_wait_first_build_waits_before_the_rings_first_copy_and_a_build_without_pdl_is_refused(tmp_path):
    """``wait_first`` (the trace diagnostic): every cp.async ring form's GEMV waits
    (griddepcontrol.wait: ACQBULK) once, before its first copy (LDGSTS); the bulk form's copies,
    which its lane 0 issues before the ring's prologue, are not moved. There is no wait to move
    in a build without PDL."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(built(stages=4, pdl=True, wait_first=True))
    codes = sass_by_function(cubin)
    rings = [(form, rows) for form in nvfp4_mma.KERNELS if form != "bulk" for rows in (8, 16)]
    for name in (nvfp4_mma.kernel_name(form, kw, rows) for form, rows in [*rings, ("ring", 8)]
                 for kw in nvfp4_mma.KWARPS):
        code = codes[name]
        assert code.count("ACQBULK") == 1 and code.index("ACQBULK") < code.index("LDGSTS"), name
    with pytest.raises(ValueError, match="pdl=True"):
        nvfp4_mma.build_cubin("sm_90", stages=4, wait_first=True)


@needs_nvcc
def test_a_no_wait_build_never_waits_and_one_without_pdl_is_refused(tmp_path):
    """``no_wait`` (nvfp4_launch_chain.py's ``no wait`` variant): no kernel of the build waits
    for the kernel before (no griddepcontrol.wait: ACQBULK), where every GEMV kernel of the PDL
    build it diagnoses does; there is nothing to drop without PDL."""
    codes = {no_wait: built_sass(tmp_path, stages=4, pdl=True, no_wait=no_wait) for no_wait in (False, True)}
    gemvs = [nvfp4_mma.kernel_name(form, kw, rows) for form in nvfp4_mma.KERNELS
             for kw in nvfp4_mma.KWARPS for rows in (8, 16)]
    assert all("ACQBULK" in codes[False][name] for name in gemvs)
    assert not any("ACQBULK" in code for code in codes[True].values())
    assert set(codes[True]) == set(codes[False])
    with pytest.raises(ValueError, match="pdl=True"):
        nvfp4_mma.build_cubin("sm_90", stages=4, no_wait=True)


@needs_nvcc
def test_a_wg_build_adds_the_wgmma_kernels_and_changes_no_other_kernel(tmp_path):
    """``wg`` (sm_90a): the ``WG_FORMS`` kernels beside every kernel of the build without it, whose
    SASS is that build's; a wgmma kernel issues eight HGMMAs a superstep (m64n8 up to 8 rows,
    m64n16 past), none of mma.sync's HMMAs, one named barrier a superstep (its ring of 4
    unrolled), x loaded a piece a set a superstep a lane (a quarter of the GEMV's loads), within
    the GEMV's register budgets (80 a thread; 128 for 16 rows) and without spills."""
    plain, wg = (built_sass(tmp_path, stages=4, pdl=True, **({"wg": True} if on else {})) for on in (False, True))
    names = {nvfp4_mma.kernel_name(form, 1, rows) for form in nvfp4_mma.WG_FORMS for rows in (8, 16)
             if form not in nvfp4_mma.WG_TMA_FORMS}  # (the TMA forms: the natural build's alone)
    assert set(wg) == set(plain) | names and not names & set(plain)
    assert all(wg[name].split() == plain[name].split() for name in plain)
    cubin = tmp_path / "wg.cubin"
    cubin.write_bytes(built(stages=4, pdl=True, wg=True))
    resources = dict(re.findall(r"Function (\w+):\s+(REG:.*)", cuobjdump("-res-usage", cubin)))
    for name in names:
        sixteen = name.endswith("_r16")
        hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16", wg[name])
        assert hgmma == ["16" if sixteen else "8"] * 8 * 4 and "HMMA" not in wg[name], name
        assert len(re.findall(r"BAR\.SYNC\S* 0x1, 0x80", wg[name])) == 4, name
        assert len(re.findall(r"\bLDG\.E\.128", wg[name])) == (2 if sixteen else 1) * (4 + 2), name  # (+ the prologue's two)
        registers = int(re.search(r"REG:(\d+)", resources[name]).group(1))
        assert registers <= (128 if sixteen else 80) and "LOCAL:0" in resources[name], (name, resources[name])


@needs_nvcc
def test_a_natural_build_holds_the_wgmma_forms_at_one_to_four_warpgroups_copying_x_beside_the_weights(tmp_path):
    """``columns="natural"`` (with ``wg``): the ``WG_FORMS`` kernels at ``WG_KWARPS`` warpgroups a
    block and the dequantizing kernels, nothing else. A wgmma kernel issues eight HGMMAs a
    superstep of its unrolled ring of 4 (m64n8 up to 8 rows, m64n16 past) and loads no x into
    registers: x is copied by cp.async (LDGSTS), a set a thread a superstep (rows past m zeros,
    read from nowhere: no branch), in the prologue's 3 supersteps and each of the ring's 4,
    beside the weights' three copies a lane (``wg``; the bulk form's weights are bulk copies,
    UBLKCP), or (the ``_tma`` forms) by two TMA copies a superstep (UTMALDG.2D, one thread's),
    then no proxy fence in the loop and one more warpgroup barrier (past its x barriers'
    initialization); one proxy fence and one warpgroup barrier a
    superstep; no stack, no local memory, no static shared memory past the 1 KiB the card
    reserves (all of it dynamic: ``wg_shared_bytes``), registers within the launch bounds (80 a
    thread at 24 warps a multiprocessor, 128 at 16)."""
    code = built_sass(tmp_path, stages=4, pdl=True, wg=True, columns="natural")
    names = {nvfp4_mma.kernel_name(form, kw, rows) for form in nvfp4_mma.WG_FORMS
             for kw in nvfp4_mma.WG_KWARPS for rows in (8, 16)}
    assert set(code) == names | set(nvfp4_mma.DEQUANTS.values())
    cubin = tmp_path / "natural.cubin"
    cubin.write_bytes(built(stages=4, pdl=True, wg=True, columns="natural"))
    resources = dict(re.findall(r"Function (\w+):\s+(REG:.*)", cuobjdump("-res-usage", cubin)))
    for name in names:
        sets, bulk, tma = (2 if name.endswith("_r16") else 1), "_bulk" in name, "_tma" in name
        kw = int(re.search(r"_kw(\d)", name).group(1)) if "_kw" in name else 1
        assert re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16", code[name]) == [str(8 * sets)] * 8 * 4, name
        assert "HMMA" not in code[name] and not re.search(r"\bLDG\.E\S*\.128", code[name]), name
        copies = len(re.findall(r"\bLDGSTS\.E\.BYPASS\.128", code[name]))
        assert copies == (3 + 4) * ((0 if tma else sets) + (0 if bulk else 3)), (name, copies)
        assert len(re.findall(r"\bUTMALDG\.2D\b", code[name])) == (3 + 4) * 2 * tma, name
        assert ("UBLKCP" in code[name]) == bulk, name
        assert len(re.findall(r"BAR\.SYNC\S* R\d+, 0x80", code[name])) == 4 + tma, name
        if not tma:
            assert len(re.findall(r"FENCE\.VIEW\.ASYNC\.S", code[name])) >= 4, name
        assert ("BAR.SYNC.DEFER_BLOCKING 0x0" in code[name]) == (kw > 1), name  # the warpgroups' sums added
        usage = resources[name]
        registers = int(re.search(r"REG:(\d+)", usage).group(1))
        budget = 65536 // (32 * 4 * kw * max(1, (6 if sets == 1 else 4) // kw))
        assert registers <= min(budget, 255), (name, usage)
        assert "STACK:0" in usage and "LOCAL:0" in usage and "SHARED:1024 " in usage + " ", (name, usage)


@needs_nvcc
def test_an_x_once_build_drops_the_loops_x_loads_and_nothing_else_and_x_same_keeps_them(tmp_path):
    """``x_once`` (nvfp4_launch_chain.py's ``x once ...`` variants): every form that loads x into
    registers in the ring loop (the GEMV forms but xring, and the ring and math diagnostics)
    issues 4 fewer 16-byte x loads a set a superstep of its unrolled ring (4), its MMAs all there;
    the xring form (x in its ring) and the register form are the GEMV's. ``x_same`` (``x same``,
    every superstep's x loads from the first one's pieces) keeps every load but the math
    diagnostic's."""
    codes = {option: built_sass(tmp_path, stages=4, pdl=True, **({option: True} if option else {}))
             for option in (None, "x_once", "x_same")}
    loads = {option: {name: len(re.findall(r"\bLDG\.", code)) for name, code in by_name.items()}
             for option, by_name in codes.items()}
    with pytest.raises(ValueError, match="one at a time"):
        nvfp4_mma.build_cubin("sm_90", x_once=True, x_same=True)
    math = set(nvfp4_mma.kernel_name("math", kw) for kw in nvfp4_mma.KWARPS)  # (no copies in its loop:
    assert {n: c for n, c in loads["x_same"].items() if n not in math} == {  # nvcc merges the same loads)
        n: c for n, c in loads[None].items() if n not in math}
    for form in (*nvfp4_mma.KERNELS, *nvfp4_mma.DIAGNOSTICS, *nvfp4_mma.ONE_SET):
        for kw in nvfp4_mma.KWARPS:
            for rows, tiles in ((8, 1), (16, 1), (16, 2)):
                if (rows > 8 and form not in nvfp4_mma.KERNELS) or (
                        tiles == 2 and not nvfp4_mma.two_tiles_built(form, 4, kw)):
                    continue
                name = nvfp4_mma.kernel_name(form, kw, rows, tiles)
                assert codes["x_once"][name].count("HMMA") == codes[None][name].count("HMMA"), name
                if form in ("xring", *nvfp4_mma.ONE_SET):
                    assert codes["x_once"][name].split() == codes[None][name].split(), name
                else:
                    assert loads["x_once"][name] == loads[None][name] - 4 * 4 * rows // 8, name


@needs_nvcc
def test_the_r16_diagnostics_drop_the_second_sets_x_loads_or_its_mmas_and_nothing_else(tmp_path):
    """``r16_diag`` (nvfp4_launch_chain.py's ``r16 ...`` variants): 1, every 16-row kernel that
    loads x into registers issues 4 fewer x loads (LDG) a superstep of its unrolled ring and 4
    fewer before its loop, its MMAs all there; 2, its second set's 8 MMAs a superstep are not
    issued (an 8-row kernel's count) and its x loads all are. The 8-row kernels are the GEMV's."""
    builds = {diag: built_sass(tmp_path, stages=4, pdl=True, columns="coalesced", row_scale="wait", r16_diag=diag)
              for diag in (0, 1, 2)}
    loads = {diag: {name: len(re.findall(r"\bLDG\.", code)) for name, code in codes.items()}
             for diag, codes in builds.items()}
    mmas = {diag: {name: code.count("HMMA.16816.F32.BF16") for name, code in codes.items()}
            for diag, codes in builds.items()}
    for form in nvfp4_mma.KERNELS:
        for kw in nvfp4_mma.KWARPS:
            eight, sixteen = nvfp4_mma.kernel_name(form, kw), nvfp4_mma.kernel_name(form, kw, 16)
            for diag in (1, 2):  # (the dump's column padding varies a build: compared word by word)
                same = builds[diag][eight].split() == builds[0][eight].split()
                assert same, (diag, eight)
            fewer = 0 if form == "xring" else 4 * (4 + 1)  # (xring's x comes by cp.async: both sets copied)
            assert loads[1][sixteen] == loads[0][sixteen] - fewer, sixteen
            assert mmas[1][sixteen] == mmas[0][sixteen] == 2 * mmas[0][eight], sixteen
            assert loads[2][sixteen] == loads[0][sixteen] and mmas[2][sixteen] == mmas[0][eight], sixteen
    with pytest.raises(ValueError, match="r16_diag"):
        nvfp4_mma.build_cubin("sm_90", r16_diag=3)
    with pytest.raises(ValueError, match="r16_warps"):  # (its builds: lane r16r33, run in r16f34)
        nvfp4_mma.build_cubin("sm_90", r16_warps=18)


@needs_nvcc
def test_row_scale_is_read_before_the_wait_at_start_after_it_at_wait_and_in_the_epilogue_at_end(tmp_path):
    """``row_scale``: every GEMV form's kernel (1, 2, 4 warps a tile; 8 and 16 rows; two tiles a
    warp) loads its lane's two row_scale words a tile (32-bit loads through L2:
    LDG.E.STRONG.GPU) before griddepcontrol.wait (ACQBULK) at "start", after it but before the
    first MMA at "wait", and neither at "end" (the default: in the epilogue); "start" and "wait"
    fit the registers of "end" with no stack, but for the ``ahead`` forms at "start" (8 bytes)."""
    def sass(row_scale):
        cubin = tmp_path / "k.cubin"
        cubin.write_bytes(built(stages=4, pdl=True, columns="coalesced", row_scale=row_scale))
        usage = dict(re.findall(r"Function (\w+):\s+(REG:.*)", cuobjdump("-res-usage", cubin)))
        return sass_by_function(cubin), usage

    def scale_loads(code: str, upto: str) -> int:
        return len(re.findall(r"LDG\.E\.STRONG\.GPU ", code[:code.index(upto)]))

    builds = {when: sass(when) for when in nvfp4_mma.ROW_SCALE_READS}
    end = builds["end"][0]
    names = [(nvfp4_mma.kernel_name(form, kw, rows, tiles), form, tiles) for form in nvfp4_mma.KERNELS
             for kw in nvfp4_mma.KWARPS for rows, tiles in ((8, 1), (16, 1), (16, 2))
             if tiles == 1 or nvfp4_mma.two_tiles_built(form, 4, kw)]
    for name, form, tiles in names:
        assert scale_loads(end[name], "ACQBULK") == 0 and scale_loads(end[name], "HMMA") == 0, name
        for when, (code, usage) in builds.items():
            if when == "end":
                continue
            assert scale_loads(code[name], "ACQBULK") == (2 * tiles if when == "start" else 0), (name, when)
            assert scale_loads(code[name], "HMMA") == 2 * tiles, (name, when)
            assert (form == "ahead" and when == "start") or "STACK:0" in usage[name], (name, when, usage[name])
    with pytest.raises(ValueError, match="reads its row_scale at one of end, start, wait, not 'soon'"):
        nvfp4_mma.build_cubin("sm_90", row_scale="soon")


@needs_nvcc
def test_the_register_form_asks_for_a_warps_first_eight_supersteps_before_its_wait_and_x_after(tmp_path):
    """``regs`` (``ONE_SET``): no ring, no copies to shared memory; each lane's 16 pieces of codes
    (two 16-byte loads a superstep, through L2: LDG.E.128.STRONG.GPU) and eight scale loads of
    its first ``REG_STEPS`` = 8 supersteps come before griddepcontrol.wait (ACQBULK) in a PDL
    build, x (coherent loads) and every store after it; eight MMAs a superstep, the loop of 8
    unrolled; in at most 168 registers (3 blocks of 4 warps a multiprocessor), no stack; built
    at 1, 2 and 4 warps a tile, for 8 rows of x only. Its memory side alone (``regs_fold``) the
    same, with no MMA."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(built(stages=4, pdl=True, columns="coalesced"))
    resources = dict(re.findall(r"Function (\w+):\s+(REG:.*)", cuobjdump("-res-usage", cubin)))
    codes = sass_by_function(cubin)
    for form, kw in ((form, kw) for form in one_set for kw in nvfp4_mma.KWARPS):
        name = nvfp4_mma.kernel_name(form, kw)
        code, line = codes[name], resources[name]
        assert int(re.search(r"REG:(\d+)", line).group(1)) <= 168 and "STACK:0" in line, (name, line)
        assert "LDGSTS" not in code and "UBLKCP" not in code and "DEPBAR" not in code, name
        assert code.count("HMMA.16816.F32.BF16") == (8 * 8 if form == "regs" else 0), name  # regs_fold: no math
        wait = code.index("ACQBULK")
        assert code.count("ACQBULK") == 1, name
        assert code[:wait].count("LDG.E.128.STRONG.GPU") >= 16, name  # codes, then 8 scale loads
        assert code[:wait].count("LDG.E.64") + code[:wait].count("LDG.E.CONSTANT") >= 8, name
        assert "LDG.E.128.STRONG.SM" not in code[:wait] and "LDG.E.128.STRONG.SM" in code[wait:], name  # x
        for op in ("STG.", "ATOM", "RED."):
            assert op not in code[:wait], (name, op)
    with pytest.raises(ValueError, match="regs form is built for 8 rows of x, not 16"):
        nvfp4_mma.kernel_name("regs", 4, 16)
    with pytest.raises(ValueError, match="not 8 \\(regs\\)"):
        nvfp4_mma.kernel_name("regs", 8)
    wide = tmp_path / "w.cubin"
    wide.write_bytes(built(stages=4, warps=nvfp4_mma.WIDE_WARPS))
    assert not any("regs" in name for name in sass_by_function(wide))


@needs_nvcc
def test_a_trace_build_marks_every_gemv_kernels_warps_and_a_shipped_build_reads_no_timer(tmp_path):
    """``trace=True`` (tools/gpu/nvfp4_trace.py): every GEMV kernel reads %globaltimer and the
    clock at its marks (seven taken a warp; a kernel's code may hold more than one copy of a
    mark) and appends to the ``mma_trace`` records; the dequantizing kernels are not traced.
    The build the engine launches reads neither timer and has no trace records."""
    traced, shipped = tmp_path / "t.cubin", tmp_path / "s.cubin"
    traced.write_bytes(built(stages=4, pdl=True, columns="coalesced", trace=True))
    shipped.write_bytes(built(stages=4, pdl=True, columns="coalesced"))
    for name, code in sass_by_function(traced).items():
        if name in nvfp4_mma.DEQUANTS.values():
            assert "SR_GLOBALTIMER" not in code, name
            continue
        assert code.count("SR_GLOBALTIMERLO") >= 7 and code.count("SR_CLOCKLO") >= 7, name
        assert "ATOM" in code or "RED." in code, name  # the record's slot
    assert "mma_trace_next" in cuobjdump("-elf", traced)
    assert all("SR_GLOBALTIMER" not in code and "SR_CLOCK" not in code
               for code in sass_by_function(shipped).values())
    assert "mma_trace" not in cuobjdump("-elf", shipped)


@needs_nvcc
def test_a_pdl_build_lets_the_next_kernel_launch_after_its_last_mma_or_at_its_start_when_asked(tmp_path):
    """``griddepcontrol.launch_dependents`` (PREEXIT) once in every GEMV kernel: after its last
    MMA by default (its weights are read and used), before its first weight copy with
    ``trigger="start"``;
    never in the dequantizing kernels (launched in order)."""
    for trigger in nvfp4_mma.TRIGGERS:
        cubin = tmp_path / f"{trigger}.cubin"
        cubin.write_bytes(built(stages=4, pdl=True, trigger=trigger))
        for name, code in sass_by_function(cubin).items():
            if name in nvfp4_mma.DEQUANTS.values():
                assert "PREEXIT" not in code, name
                continue
            assert code.count("PREEXIT") == 1, (trigger, name)
            first_copy = min(code.index(op) for op in ("LDGSTS", "UBLKCP", "LDG.E.128.STRONG.GPU") if op in code)
            if trigger == "start":
                assert code.index("PREEXIT") < first_copy, name
            elif "HMMA" in code:  # (not the ring diagnostic: no MMA)
                assert code.index("PREEXIT") > code.rindex("HMMA"), name
    with pytest.raises(ValueError, match="launch at one of read, start, not 'end'"):
        nvfp4_mma.build_cubin("sm_90", pdl=True, trigger="end")


def stand_in_launcher(driver, function=None, function16=None, kwarps=1, pdl=False, **fields):
    """An ``MmaGemv`` without CUDA (the driver stood in for, no cubin loaded): the plain form, a
    ring of 4, ``fields`` (attributes) over the defaults, its parameter blocks built."""
    gemv = object.__new__(nvfp4_mma.MmaGemv)
    defaults = dict(form="plain", stages=4, warps=nvfp4_mma.block_warps(kwarps, fields.get("form", "plain")),
                    tiles16=1, rows16_from=9, _counters=None, spread=False, columns=layout.COLUMNS)
    for name, value in (defaults | fields).items():
        setattr(gemv, name, value)
    gemv.cuda, gemv.function, gemv.function16, gemv.kwarps, gemv.pdl = driver, function, function16, kwarps, pdl
    gemv._make_arguments()
    return gemv


def test_the_pdl_launch_configuration_is_cuda_h_s_layout_with_its_attribute():
    assert ctypes.sizeof(nvfp4_mma.LaunchAttribute) == 72 and nvfp4_mma.LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(nvfp4_mma.LaunchConfig) == 56
    assert (nvfp4_mma.LaunchConfig.stream.offset, nvfp4_mma.LaunchConfig.attrs.offset,
            nvfp4_mma.LaunchConfig.num_attrs.offset) == (32, 40, 48)
    config = nvfp4_mma.launch_config((96, 2, 1), (128, 1, 1), 4096, ctypes.c_void_p(7))
    assert list(config.grid) == [96, 2, 1] and list(config.block) == [128, 1, 1]
    assert (config.shared, config.stream, config.num_attrs) == (4096, 7, 1)
    assert config.attrs[0].id == 6 and config.attrs[0].value[0] == 1  # programmatic serialization


def test_a_pdl_launcher_launches_with_the_attribute_and_a_plain_one_without(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("Stream", (), {"cuda_stream": 0}))

    class FakeDriver:
        def cuLaunchKernelEx(self, config, function, params, extra):  # noqa: N802 - the driver's name
            calls.append(("ex", list(config._obj.grid), config._obj.attrs[0].id))
            return 0

        def cuLaunchKernel(self, function, *args):  # noqa: N802
            calls.append(("plain", list(args[:3]), args[3]))
            return 0

    packed, scales = weights(64, 256)
    words, codes = layout.repack(packed, scales)
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    # 4 tiles: a block of 4 at one warp a tile, 4 blocks of 4 warps at 4, of 8 warps (block_warps) at 8
    for pdl, kwarps in ((True, 1), (False, 1), (False, 4), (False, 8)):
        gemv = stand_in_launcher(FakeDriver(), kwarps=kwarps, pdl=pdl)
        gemv(words, codes, x, None, 16, row_scale=torch.ones(64),
             out=torch.empty(1, 64, dtype=torch.bfloat16))
    assert calls == [("ex", [1, 1, 1], 6), ("plain", [1, 1, 1], 128), ("plain", [4, 1, 1], 128),
                     ("plain", [4, 1, 1], 256)]


def test_a_natural_wgmma_launch_is_a_block_of_kwarps_warpgroups_asking_its_rings_as_dynamic_shared_memory(monkeypatch):
    # 8 tiles: two blocks of four tiles at any kwarps, 128 kwarps threads each; the 8- and 16-row
    # kernels ask wg_shared_bytes of their sets of x (the register-staged build asks none)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("Stream", (), {"cuda_stream": 0}))
    calls = []

    class FakeDriver:
        def cuLaunchKernel(self, function, *args):  # noqa: N802 - the driver's name
            calls.append((function, list(args[:3]), args[3], args[6]))
            return 0

    packed, scales = weights(128, 256)
    words, codes = layout.repack(packed, scales, "natural")
    for kwarps in nvfp4_mma.WG_KWARPS:
        gemv = stand_in_launcher(FakeDriver(), "eight", "sixteen", kwarps, form="wg", columns="natural")
        for m in (3, 12):
            gemv(words, codes, torch.zeros(m, 256, dtype=torch.bfloat16), None, 16, row_scale=torch.ones(128),
                 out=torch.empty(m, 128, dtype=torch.bfloat16))
        assert calls[-2:] == [("eight", [2, 1, 1], 128 * kwarps, nvfp4_mma.wg_shared_bytes(kwarps, 4, 8)),
                              ("sixteen", [2, 1, 1], 128 * kwarps, nvfp4_mma.wg_shared_bytes(kwarps, 4, 16))]
    staged = stand_in_launcher(FakeDriver(), "eight", "sixteen", 1, form="wg", columns="coalesced")
    staged(layout.repack(packed, scales, "coalesced")[0], codes, torch.zeros(1, 256, dtype=torch.bfloat16), None, 16,
           row_scale=torch.ones(128), out=torch.empty(1, 128, dtype=torch.bfloat16))
    assert calls[-1] == ("eight", [2, 1, 1], 128, 0)


def test_a_tma_launch_passes_x_s_tensor_map_encoded_once_an_address_and_row_count(monkeypatch):
    # the map: x (M, K) bf16 as (K, M), rows 2K bytes apart, boxes of 64 columns by 8 rows (the
    # 8-row kernel) or 16 (the 16-row one), the 128-byte swizzle, zeros past M; past the GEMV's
    # 18 parameters; one encoding a (address, M, K, rows), however many launches
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("Stream", (), {"cuda_stream": 0}))
    encoded, launched = [], []

    class FakeDriver:
        def cuTensorMapEncodeTiled(self, tensor_map, dtype, rank, address, dims, strides, box, elements,  # noqa: N802
                                   interleave, swizzle, promotion, fill):
            encoded.append((dtype, rank, address.value, list(dims), list(strides), list(box), list(elements),
                            interleave, swizzle, fill))
            tensor_map._obj.opaque[0], tensor_map._obj.opaque[1] = address.value, box[1]
            return 0

        def cuLaunchKernel(self, function, *args):  # noqa: N802 - the driver's name
            params = ctypes.cast(args[8], ctypes.POINTER(ctypes.c_void_p))
            x_map = ctypes.cast(params[18], ctypes.POINTER(nvfp4_mma.TensorMap)).contents
            launched.append((function, list(x_map.opaque[:2])))
            return 0

    packed, scales = weights(128, 256)
    words, codes = layout.repack(packed, scales, "natural")
    gemv = stand_in_launcher(FakeDriver(), "eight", "sixteen", 2, form="wg_tma", columns="natural")
    x = torch.zeros(16, 256, dtype=torch.bfloat16)
    for m in (3, 3, 12):
        gemv(words, codes, x[:m], None, 16, row_scale=torch.ones(128), out=torch.empty(m, 128, dtype=torch.bfloat16))
    address = x.data_ptr()
    assert encoded == [(9, 2, address, [256, m], [512], [64, rows], [1, 1], 0, 3, 0) for m, rows in ((3, 8), (12, 16))]
    assert launched == [("eight", [address, 8]), ("eight", [address, 8]), ("sixteen", [address, 16])]


def test_a_launcher_takes_its_sixteen_row_kernel_from_its_rows16_from_rows_on(monkeypatch):
    # rows16_from 5: 4 rows of x take the 8-row kernel, 5 and 16 the 16-row one (two tiles a
    # warp: 4 tiles in one block of 4 warps at one warp a tile, two tiles each)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("Stream", (), {"cuda_stream": 0}))
    launched = []

    class FakeDriver:
        def cuLaunchKernel(self, function, *args):  # noqa: N802 - the driver's name
            launched.append((function, args[0]))
            return 0

    packed, scales = weights(128, 256)
    words, codes = layout.repack(packed, scales)
    gemv = stand_in_launcher(FakeDriver(), function="eight", function16="sixteen", tiles16=2, rows16_from=5)
    for m in (4, 5, 16):
        gemv(words, codes, torch.zeros(m, 256, dtype=torch.bfloat16), None, 16, row_scale=torch.ones(128),
             out=torch.empty(m, 128, dtype=torch.bfloat16))
    assert launched == [("eight", 2), ("sixteen", 1), ("sixteen", 1)]
    for bad in (0, 10):
        with pytest.raises(ValueError, match=f"takes from 1 to 9 rows of x on, not {bad}"):
            nvfp4_mma.MmaGemv(b"", "plain", 4, rows16_from=bad)


H100_SHARED = {"sms": 132, "per_sm": 233472, "per_block": 232448, "reserved": 1024}


def resident_blocks(static: int, registers_allow: int):
    """The driver's occupancy, as a stand-in: blocks a multiprocessor holds by shared memory
    (each block's own bytes, its dynamic bytes and the reserved KiB) and registers."""
    return lambda dynamic: min(registers_allow, H100_SHARED["per_sm"] // (static + dynamic + H100_SHARED["reserved"]))


#: spread launches (blocks, a block's static shared bytes, blocks its registers allow a
#: multiprocessor, dynamic bytes it needs), each a case of both paddings' tests
SPREAD_LAUNCHES = [
    (256, 18560, 3, 0),      # down M = 1: eight-warp blocks, 3 by registers; 2 a multiprocessor
    (384, 18560, 6, 0),      # qkv M = 1: four-warp blocks, 6 by registers; 3
    (384, 18432, 4, 0),      # qkv at 16 rows: four-warp blocks, 4 by registers; 3
    (256, 18560, 6, 0),      # o: 2
    (132, 18560, 6, 0),      # a block a multiprocessor
    (256, 18560, 6, 16384),  # the xring form's ring of x: at least its bytes
]


@pytest.mark.parametrize("blocks, static, registers_allow, need", SPREAD_LAUNCHES)
def test_a_spread_launch_asks_for_the_shared_memory_that_holds_a_multiprocessor_to_its_share(
        blocks, static, registers_allow, need):
    cap = -(-blocks // H100_SHARED["sms"])
    resident = resident_blocks(static, registers_allow)
    dynamic = nvfp4_mma.spread_blocks_bytes(cap, need, static, H100_SHARED, resident)
    assert resident(dynamic) == cap and dynamic >= need
    assert static + dynamic <= H100_SHARED["per_block"]


@pytest.mark.parametrize("blocks, static, registers_allow, need", SPREAD_LAUNCHES)
def test_the_least_padding_holds_a_multiprocessor_to_its_share_and_a_kib_less_would_not(
        blocks, static, registers_allow, need):
    cap = -(-blocks // H100_SHARED["sms"])
    resident = resident_blocks(static, registers_allow)
    least = nvfp4_mma.spread_blocks_bytes(cap, need, static, H100_SHARED, resident, least=True)
    most = nvfp4_mma.spread_blocks_bytes(cap, need, static, H100_SHARED, resident)
    assert resident(least) == cap and least >= need and (least - need) % 1024 == 0
    assert resident(least - 1024) > cap, "a KiB less still holds the share: not the least"
    assert least <= most and cap * (static + least) < H100_SHARED["per_sm"] - 8192, "no room left to L1"


def test_the_least_padding_is_the_first_kib_step_that_holds_the_share_else_the_most_there_is():
    one_past = lambda dynamic: 1 if dynamic > 100_000 else 6  # noqa: E731 - a stand-in driver
    assert nvfp4_mma.spread_blocks_bytes(1, 0, 1024, H100_SHARED, one_past, least=True) == 98 * 1024
    stuck = lambda dynamic: 6  # noqa: E731 - a driver that never holds fewer
    assert nvfp4_mma.spread_blocks_bytes(1, 0, 1024, H100_SHARED, stuck, least=True) == H100_SHARED["per_block"] - 1024


def test_a_launch_already_held_to_its_share_asks_for_no_more_than_it_needs():
    # 1024 blocks: 8 a multiprocessor, where registers allow 6: nothing to add
    assert nvfp4_mma.spread_blocks_bytes(8, 0, 18560, H100_SHARED, resident_blocks(18560, 6)) == 0
    assert nvfp4_mma.spread_blocks_bytes(8, 4096, 18560, H100_SHARED, resident_blocks(18560, 6)) == 4096


def test_a_spread_launcher_passes_its_padding_as_dynamic_shared_memory_a_grid(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("Stream", (), {"cuda_stream": 0}))
    launched = []

    class FakeDriver:
        def cuLaunchKernel(self, function, *args):  # noqa: N802 - the driver's name
            launched.append((args[0], args[6]))
            return 0

    gemv = stand_in_launcher(
        FakeDriver(), function=ctypes.c_void_p(1), spread=True, _device=dict(H100_SHARED, sms=2), _spread_bytes={},
        _static_bytes=lambda function: 18560,
        _resident_blocks=lambda function, dynamic: resident_blocks(18560, 6)(dynamic))
    for n in (64, 128, 512):  # 1, 2, 8 blocks of 4 tiles over 2 multiprocessors: 1, 1, 4 a multiprocessor
        packed, scales = weights(n, 256)
        words, codes = layout.repack(packed, scales)
        gemv(words, codes, torch.zeros(1, 256, dtype=torch.bfloat16), None, 16, row_scale=torch.ones(n),
             out=torch.empty(1, n, dtype=torch.bfloat16))
    (one, pad1), (two, pad2), (eight, pad8) = launched
    assert (one, two, eight) == (1, 2, 8)
    assert pad1 == pad2 and resident_blocks(18560, 6)(pad1) == 1
    assert resident_blocks(18560, 6)(pad8) == 4 and pad8 < pad1


def test_a_ring_deeper_than_shared_memory_holds_is_refused():
    with pytest.raises(ValueError, match="2 to 10 stages"):
        nvfp4_mma.build_cubin("sm_90", stages=12)




def test_an_unknown_form_and_an_xring_launcher_without_its_stages_are_refused_before_cuda():
    with pytest.raises(ValueError, match="no form 'fast'.*plain, ahead, xring, bulk, regs, ring, math"):
        nvfp4_mma.MmaGemv(b"", "fast")
    with pytest.raises(ValueError, match="runs 1, 2, 4 warps a tile, or 8 in its plain, ahead, xring, bulk "
                                         "and ring forms, not 3"):
        nvfp4_mma.MmaGemv(b"", "plain", 4, kwarps=3)
    assert nvfp4_mma.kernel_name("bulk", 8, 16) == "nvfp4_mma_gemv_bulk_kw8_r16"
    assert nvfp4_mma.kernel_name("ring", 8) == "nvfp4_mma_gemv_ring_kw8"
    with pytest.raises(ValueError, match="and ring forms, not 8 \\(math\\)"):
        nvfp4_mma.kernel_name("math", 8)
    with pytest.raises(ValueError, match="two tiles a warp are not built with 8 warps a tile"):
        nvfp4_mma.MmaGemv(b"", "plain", 4, kwarps=8, tiles16=2)
    with pytest.raises(ValueError, match="spread is one of False, True, 'least', got 'most'"):
        nvfp4_mma.MmaGemv(b"", "plain", 4, spread="most")
    with pytest.raises(ValueError, match="8 with rings of at most 5 stages; got 8 warps, 8 stages"):
        nvfp4_mma.build_cubin("sm_90", stages=8, warps=8)
    assert nvfp4_mma.kernel_name("xring", 2) == "nvfp4_mma_gemv_xring_kw2"
    assert nvfp4_mma.kernel_name("bulk", 4, 16) == "nvfp4_mma_gemv_bulk_kw4_r16"
    with pytest.raises(ValueError, match="ring form is built for 8 rows of x, not 16"):
        nvfp4_mma.kernel_name("ring", 1, 16)
    assert nvfp4_mma.kernel_name("plain", 2, 16, tiles=2) == "nvfp4_mma_gemv_kw2_r16_t2"
    with pytest.raises(ValueError, match="two tiles a warp are built for 16 rows in the plain and bulk forms"):
        nvfp4_mma.kernel_name("xring", 1, 16, tiles=2)
    with pytest.raises(ValueError, match="at most 4 stages; got stages 8"):
        nvfp4_mma.MmaGemv(b"", "plain", 8, tiles16=2)
    with pytest.raises(ValueError, match="xring form sizes its shared memory by the cubin's stages"):
        nvfp4_mma.MmaGemv(b"", "xring")
    with pytest.raises(ValueError, match="the wg form \\(natural\\) sizes its shared memory by the cubin's stages"):
        nvfp4_mma.MmaGemv(b"", "wg", columns="natural")
    with pytest.raises(ValueError, match="natural column map is read by the wgmma forms alone"):
        nvfp4_mma.MmaGemv(b"", "bulk", 4, columns="natural")
    with pytest.raises(ValueError, match="carveout is a percentage, 0 to 100, got 120"):
        nvfp4_mma.MmaGemv(b"", "plain", 4, carveout=120)


def test_a_launch_passes_the_kernels_parameters_in_order_from_blocks_built_once(monkeypatch):
    # no GPU: the driver stood in for, the parameter block read back through its pointers
    import types

    launches = []
    gemv = stand_in_launcher(
        types.SimpleNamespace(cuLaunchKernel=lambda *a: launches.append(("plain", a)) or 0,
                              cuLaunchKernelEx=lambda *a: launches.append(("pdl", a)) or 0),
        function="function", function16="function", pdl=True, tiles16=2,
        dequant_functions={form: form for form in nvfp4_mma.DEQUANTS}, _counters=torch.zeros(64, dtype=torch.int32))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: types.SimpleNamespace(cuda_stream=7))
    n, k = 64, 256
    words = torch.zeros(n // 16, k // 128, 2, 32, 4, dtype=torch.int32)
    codes = torch.zeros(n // 16, k // 128, 32, dtype=torch.int32)
    x, rs = torch.zeros(3, k, dtype=torch.bfloat16), torch.ones(n)
    out, bias = torch.empty(3, n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.bfloat16)

    def values(pointers, kinds):
        return [ctypes.cast(p, ctypes.POINTER(kind)).contents.value or 0 for p, kind in zip(pointers, kinds, strict=True)]

    ptr, i32 = ctypes.c_void_p, ctypes.c_int
    gemv_kinds = [ptr] * 4 + [i32] * 8 + [ptr] * 4 + [i32] * 2
    strides = list(nvfp4_mma.block_strides(words, codes))
    for early in (True, False, True):
        gemv(words, codes, x, None, 16, row_scale=rs, bias=bias, out=out, early=early)
        kind, args = launches[-1]
        assert kind == ("pdl" if early else "plain")
        pointers = args[2] if early else args[-2]
        assert values(pointers, gemv_kinds) == [words.data_ptr(), codes.data_ptr(), x.data_ptr(), 0, n, k, 3,
                                                *strides, 16, rs.data_ptr(), bias.data_ptr(), out.data_ptr(),
                                                gemv._counters.data_ptr(), 0, 0]
    assert len(gemv._configs) == 1  # the PDL configuration of this grid and stream, made once
    w = torch.empty(n, k, dtype=torch.bfloat16)
    gemv.dequantize(words, codes, rs, w)
    kind, args = launches[-1]
    assert args[0] == nvfp4_mma.DEQUANT_FORM and args[1] == -(-(n // 16 * 2) // (4 * nvfp4_mma.DQ_BLOCKS))
    assert values(args[-2], [ptr, ptr] + [i32] * 6 + [ptr, ptr, i32]) == [words.data_ptr(), codes.data_ptr(), n, k, *strides,
                                                               rs.data_ptr(), w.data_ptr(), 0]
    with pytest.raises(ValueError, match="takes 11 parameters, got 2"):
        gemv._dequant_args.set(1, 2)
