"""The NVFP4 format against straightforward references written here from its definition."""

from __future__ import annotations

import torch
from nvfp4_helpers import FIXTURES
from safetensors.torch import load_file

from hinge_nvfp4 import format as fp4
from hinge_nvfp4.reference import quantize_activation

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def nearest_even(value: float) -> int:
    """The E2M1 code of ``value``: nearest grid magnitude, ties to the even index, saturating."""
    mag = min(abs(value), 6.0)
    best = min(range(8), key=lambda i: (abs(GRID[i] - mag), i % 2))
    return best | (8 if value < 0 else 0)


def test_pack_then_unpack_gives_the_codes_back_low_nibble_first():
    codes = torch.randint(0, 16, (5, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    packed = fp4.pack(codes)
    assert packed.shape == (5, 16)
    assert int(packed[0, 0]) == int(codes[0, 0]) | int(codes[0, 1]) << 4
    assert torch.equal(fp4.unpack(packed), codes)


def test_cast_rounds_to_nearest_even_and_saturates_at_six():
    values = [0.0, 0.2, 0.25, 0.26, 0.74, 0.75, 1.25, 1.3, 1.75, 2.5, 2.6, 3.5, 4.9, 5.0, 5.01, 6.0, 7.5,
              1e9, -0.1, -0.75, -3.5, -5.0, -100.0]
    got = fp4.cast_fp4(torch.tensor(values)).tolist()
    assert got == [nearest_even(v) for v in values]


def test_decode_table_is_sign_and_magnitude():
    values = fp4.decode(torch.arange(16, dtype=torch.uint8)).tolist()
    assert values[:8] == GRID and values[9:] == [-g for g in GRID[1:]] and values[8] == 0.0


def reference_quantize(w: torch.Tensor):
    """The recipe, one block at a time in Python floats (float32 rounding where the format has it)."""
    s2 = torch.tensor(float(w.abs().max()), dtype=torch.float32) / 2688.0
    n, k = w.shape
    codes = torch.zeros(n, k, dtype=torch.uint8)
    scales = torch.zeros(n, k // 16, dtype=torch.float32)
    for r in range(n):
        for b in range(k // 16):
            block = w[r, b * 16:(b + 1) * 16].float()
            sb = block.abs().max() / (6.0 * s2)
            sb = torch.tensor(1.0) if float(sb) == 0 else sb
            sb8 = sb.clamp(2**-9, 448).to(torch.float8_e4m3fn).float()
            scales[r, b] = sb8
            for j in range(16):
                codes[r, b * 16 + j] = nearest_even(float(block[j] / (sb8 * s2)))
    return codes, scales, s2


def test_quantizing_a_known_matrix_matches_the_reference_recipe():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(6, 64, generator=gen) * torch.logspace(-3, 1, 6)[:, None]
    w[2, 16:32] = 0.0  # a zero block
    packed, scales, s2 = fp4.quantize_weight(w)
    codes, ref_scales, ref_s2 = reference_quantize(w)
    assert torch.equal(s2, ref_s2)
    assert torch.equal(scales.float(), ref_scales)
    assert torch.equal(fp4.unpack(packed), codes)
    assert float(scales[2, 1].float()) == 1.0 and not fp4.unpack(packed)[2, 16:32].any()


def test_dequantized_error_is_within_one_step_of_the_block():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(32, 128, generator=gen)
    packed, scales, s2 = fp4.quantize_weight(w)
    err = (fp4.dequantize(packed, scales, s2) - w).abs().reshape(32, 8, 16)
    step = (scales.float() * s2)[..., None]  # the largest half-gap of the grid (4 -> 6) is one unit
    assert bool((err <= step * (1.0 + 1e-6)).all()), float((err / step).max())


def test_weights_quantize_to_modelopts_bytes():
    """The committed ModelOpt export: same codes, block scales and global scale for its weights."""
    src = load_file(FIXTURES / "qwen3" / "source" / "model.safetensors")
    ref = load_file(FIXTURES / "qwen3" / "modelopt" / "model.safetensors")
    for name in ("model.layers.0.mlp.down_proj", "model.layers.1.self_attn.o_proj"):
        packed, scales, s2 = fp4.quantize_weight(src[name + ".weight"])
        assert torch.equal(packed, ref[name + ".weight"])
        assert torch.equal(scales.view(torch.uint8), ref[name + ".weight_scale"].view(torch.uint8))
        assert torch.equal(s2, ref[name + ".weight_scale_2"])


def test_activation_quantization_is_per_row_and_matches_the_recipe():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 32, generator=gen)
    scale = fp4.global_scale(x.abs().max())
    got = quantize_activation(x, scale)
    for r in range(3):
        alone = quantize_activation(x[r:r + 1], scale)
        assert torch.equal(alone[0], got[r])
        for b in range(2):
            block = x[r, b * 16:(b + 1) * 16]
            sx = (block.abs().max() / (6 * scale)).clamp(max=448).to(torch.float8_e4m3fn).float()
            expected = [fp4.E2M1_VALUES[nearest_even(float(v / (sx * scale)))] * float(sx) for v in block]
            assert got[r, b * 16:(b + 1) * 16].tolist() == expected
