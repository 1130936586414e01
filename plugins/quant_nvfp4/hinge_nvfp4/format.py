"""The NVFP4 format: E2M1 codes two per byte, one FP8 E4M3 scale per 16 inputs, one FP32 scale.

    W (N, K) -> weight_scale_2 = amax|W| / (6 * 448)                       (fp32, per tensor)
             -> weight_scale   = fp8(clamp(amax|block| / (6 * s2), 2^-9, 448)), 0 -> 1.0   (N, K/16)
             -> codes          = e2m1_rne_sat(W / (fp32(weight_scale) * s2))                 (N, K)
             -> weight         = codes[2i] | codes[2i + 1] << 4                            (N, K/2) uint8
    dequant: e2m1(code) * fp32(weight_scale) * weight_scale_2

Every step follows ModelOpt's recipe (``NVFP4QTensor.quantize``, ``get_weights_scaling_factor``,
``_cast_fp4``) operation by operation, so that the same input and amax give the same bytes:
the block amax in the weight's dtype, then fp32; the division by ``6 * s2``; zero blocks get
scale 1.0; the clamp to [2^-9, 448] before the fp8 cast; a true fp32 division of the weight by
``fp32(scale) * s2``; round to nearest even with saturation at 6; the sign bit set for every
negative input (a small negative value becomes code 8, -0). Activations (W4A4 emulation,
``hinge_nvfp4.reference.quantize_activation``) get the same treatment per 16-element block of
each row with the static ``input_scale``.
"""

from __future__ import annotations

import torch

BLOCK = 16  #: inputs per block scale
E2M1_MAX = 6.0
E4M3_MAX = 448.0
GLOBAL_DIVISOR = E2M1_MAX * E4M3_MAX  #: 2688: amax / 2688 is the per-tensor scale
SCALE_MIN = 2.0**-9  #: block scales are clamped to [2^-9, 448] before the fp8 cast

#: code -> value; bit 3 is the sign, bits 0-2 index the magnitudes (code 8, -0, decodes as 0)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
#: |x| above bound i rounds up past magnitude i; at an odd-mantissa bound the tie goes up (to even)
_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIES_UP = (0.75, 1.75, 3.5)


def e2m1_table(device: torch.device | str | None = None) -> torch.Tensor:
    return torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)


def cast_fp4(x: torch.Tensor) -> torch.Tensor:
    """float32 values (already divided by their scales) -> E2M1 codes (uint8 0..15), round to
    nearest even, saturating at +-6."""
    mag = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for bound in _BOUNDS:
        code += (mag > bound).to(torch.uint8)
    for tie in _TIES_UP:
        code += (mag == tie).to(torch.uint8)
    return code | ((x < 0).to(torch.uint8) << 3)


def pack(codes: torch.Tensor) -> torch.Tensor:
    """(..., K) codes -> (..., K/2) bytes: element 2i in the low nibble, 2i + 1 in the high."""
    if codes.shape[-1] % 2:
        raise ValueError(f"cannot pack {codes.shape[-1]} codes per row: NVFP4 packs pairs")
    return (codes[..., 1::2] << 4) | codes[..., 0::2]


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """(..., K/2) bytes -> (..., K) codes."""
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def decode(codes: torch.Tensor) -> torch.Tensor:
    """Codes -> float32 values."""
    return e2m1_table(codes.device)[codes.long()]


def global_scale(amax: torch.Tensor | float) -> torch.Tensor:
    """The fp32 per-tensor scale of a tensor whose largest magnitude is ``amax``: amax / 2688."""
    return torch.as_tensor(amax).float() / GLOBAL_DIVISOR


def block_amax(x: torch.Tensor) -> torch.Tensor:
    """(..., K) -> (..., K/16) largest magnitude per block, computed in x's dtype, then fp32."""
    if x.shape[-1] % BLOCK:
        raise ValueError(f"the input dim ({x.shape[-1]}) is not a multiple of {BLOCK}: NVFP4 "
                         "cannot quantize it (exclude the layer)")
    return x.reshape(*x.shape[:-1], -1, BLOCK).abs().amax(dim=-1).float()


def block_scales(x: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    """The fp8 E4M3 per-block scales of ``x`` under the per-tensor scale ``scale_2``."""
    scale = block_amax(x) / (E2M1_MAX * scale_2)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return scale.clamp(min=SCALE_MIN, max=E4M3_MAX).to(torch.float8_e4m3fn)


def quantize(x: torch.Tensor, scale_2: torch.Tensor, scales: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (..., K) -> (packed codes (..., K/2) uint8, block scales (..., K/16) fp8) for the
    per-tensor scale ``scale_2`` (a 0-d tensor, or one that broadcasts over the leading dims)."""
    if scales is None:
        scales = block_scales(x, scale_2)
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
    scaled = blocks / (scales.float() * scale_2).unsqueeze(-1)
    return pack(cast_fp4(scaled.reshape(x.shape))), scales


def quantize_weight(weight: torch.Tensor, amax: torch.Tensor | float | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight (N, K) -> (packed (N, K/2) uint8, weight_scale (N, K/16) fp8, weight_scale_2 fp32
    0-d), ModelOpt's recipe; ``amax`` defaults to the weight's own (a fused group passes the
    group's largest, so its partitions share weight_scale_2)."""
    if amax is None:
        amax = weight.abs().amax().float()
    scale_2 = global_scale(amax)
    packed, scales = quantize(weight, scale_2)
    return packed, scales, scale_2


def dequantize(packed: torch.Tensor, scales: torch.Tensor, scale_2: torch.Tensor | float,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Packed codes (..., K/2), block scales (..., K/16), per-tensor scale (0-d, or broadcasting
    over the leading dims with a trailing 1) -> values (..., K) in ``dtype``."""
    values = decode(unpack(packed))
    blocks = values.reshape(*values.shape[:-1], -1, BLOCK) * scales.float().unsqueeze(-1)
    scale_2 = torch.as_tensor(scale_2, dtype=torch.float32, device=packed.device)
    if scale_2.dim():
        scale_2 = scale_2.reshape(*scale_2.shape, 1)
    return (blocks * scale_2).reshape(values.shape).to(dtype)

