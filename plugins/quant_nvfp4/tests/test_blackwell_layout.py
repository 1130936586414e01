"""The Blackwell path's scale layout (the only part testable without a Blackwell GPU): the 128x4
swizzle against the byte-offset formula of CUTLASS / flashinfer (``get_sf_out_offset_128x4``),
with zero padding; and the kernel choice never picks flashinfer without sm_100."""

from __future__ import annotations

import pytest
import torch

from hinge_nvfp4.blackwell import swizzle_scales
from hinge_nvfp4.kernels import select_kernel
from hinge_nvfp4.options import NVFP4Options


def offset(m: int, kb: int, kb_pad: int) -> int:
    return ((m // 128) * (kb_pad // 4) + kb // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + kb % 4


@pytest.mark.parametrize("rows, blocks", [(128, 4), (200, 6), (3, 1), (256, 8)])
def test_every_scale_lands_at_the_cutlass_offset_and_padding_is_zero(rows, blocks):
    gen = torch.Generator().manual_seed(rows)
    bits = torch.randint(1, 127, (rows, blocks), dtype=torch.uint8, generator=gen)  # no zero scale
    flat = swizzle_scales(bits.view(torch.float8_e4m3fn)).view(torch.uint8)
    rows_pad, kb_pad = -(-rows // 128) * 128, -(-blocks // 4) * 4
    assert flat.numel() == rows_pad * kb_pad
    placed = torch.zeros_like(flat, dtype=torch.bool)
    for m in range(rows):
        for kb in range(blocks):
            at = offset(m, kb, kb_pad)
            assert int(flat[at]) == int(bits[m, kb]), (m, kb)
            placed[at] = True
    assert not flat[~placed].any(), "padding must be zero"


def test_auto_never_selects_flashinfer_without_a_blackwell_gpu():
    options = NVFP4Options(activations="w4a4")
    assert select_kernel(options, "cpu", False).name == "torch"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (10, 0):
        with pytest.raises(ValueError, match="(Blackwell|CUDA only)"):
            select_kernel(NVFP4Options(activations="w4a4", kernel="flashinfer"), "cuda", False)
