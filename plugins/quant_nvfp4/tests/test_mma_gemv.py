"""The tensor-core NVFP4 GEMV (``hinge_nvfp4.mma_gemv``) on the CPU: its weight repack and
fragment decode, emulated as the kernel computes, give the reference GEMV (float64, from the
format's definition); and, where nvcc is installed, both kernels compile for sm_90 with no spills
and tensor-core MMAs in their loops, and the build is cached. On a GPU: test_mma_gemv_gpu.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from hinge_nvfp4 import mma_gemv as nvfp4_mma

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def weights(n, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    # every e4m3 magnitude but NaN (0x7F), subnormal scales included
    scales = torch.randint(0, 0x7F, (n, k // 16), generator=gen, dtype=torch.uint8)
    return packed, scales


def reference(packed, scales, x):
    codes = nvfp4_mma.nibbles(packed)
    value = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    scale = scales.view(torch.float8_e4m3fn).double().repeat_interleave(16, dim=1)
    return x.double() @ (value * scale).t()


@pytest.mark.parametrize("m", [1, 3, 8])
def test_the_repacked_fragments_decoded_as_the_kernel_does_give_the_reference_gemv(m):
    packed, scales = weights(48, 128, seed=m)
    x = torch.randn(m, 128, generator=torch.Generator().manual_seed(9)).bfloat16()
    words = nvfp4_mma.repack_codes(packed)
    assert words.shape == (3, 2, 32, 4) and words.dtype == torch.int32
    torch.testing.assert_close(nvfp4_mma.emulate(words, scales, x), reference(packed, scales, x),
                               rtol=1e-12, atol=1e-12)


def test_every_code_decodes_to_its_e2m1_value_in_its_fragment_place():
    # one tile, one group: codes laid out so that element (r, c) = (r + c) % 16
    r, c = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    codes = (r + c) % 16
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    packed = torch.cat([packed, torch.zeros(16, 24, dtype=torch.uint8)], dim=1)  # K = 64
    a = nvfp4_mma.fragments(nvfp4_mma.repack_codes(packed))[0, 0]
    want = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    assert torch.equal(a.abs(), want.abs())
    assert torch.equal(torch.signbit(a), codes >= 8)  # -0.0 for code 8 too


def test_shapes_the_kernel_cannot_tile_are_refused_naming_them():
    with pytest.raises(ValueError, match="N % 16 == 0 and K % 64 == 0"):
        nvfp4_mma.repack_codes(torch.zeros(24, 32, dtype=torch.uint8))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
@pytest.mark.skipif(not __import__("importlib").util.find_spec("triton"), reason="cuobjdump: Triton's")
@pytest.mark.parametrize("stages", [2, 4, 8, 16])
def test_both_kernels_compile_for_hopper_without_spills_and_with_mmas_in_their_loops(tmp_path, stages):
    """Both kernels: at most 64 registers, no stack, four MMAs a step, the split reduction's
    fence and atomic count; the async one copies its codes and scales with cp.async (LDGSTS) and
    waits on them (DEPBAR), a ring of ``stages`` steps of 576 bytes for each of its 4 warps in
    shared memory."""
    cuobjdump = shutil.which("cuobjdump") or str(Path(__import__("triton").__file__).parent
                                                 / "backends" / "nvidia" / "bin" / "cuobjdump")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(nvfp4_mma.build_cubin("sm_90", stages=stages))
    usage = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    resources = dict(re.findall(r"Function (\w+):\s+(REG:.*)", usage))
    assert set(resources) == set(nvfp4_mma.KERNELS)
    for name, line in resources.items():
        registers = int(re.search(r"REG:(\d+)", line).group(1))
        assert 0 < registers <= 64 and "STACK:0" in line and "LOCAL:0" in line, f"{name}: {line}"
    ring_bytes = 4 * stages * (32 * 16 + 16 * 4)  # + the 1 KiB sm_90 reserves a block
    assert f"SHARED:{ring_bytes + 1024}" in resources["nvfp4_mma_gemv_async"]
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True).stdout
    functions = {part.split()[0]: part for part in sass.split("Function : ")[1:]}
    for name in nvfp4_mma.KERNELS:
        assert functions[name].count("HMMA.16816.F32.BF16") == 4, name  # a step's four groups
    ring = functions["nvfp4_mma_gemv_async"]
    assert "LDGSTS" in ring and "DEPBAR" in ring and "LDG.E.128" not in ring
    for name in nvfp4_mma.KERNELS:  # the split reduction: a fence, one count a warp
        assert "MEMBAR" in functions[name] and re.search(r"\bATOM|\bRED\.", functions[name]), name
