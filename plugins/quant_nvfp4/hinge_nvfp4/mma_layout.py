"""The tensor-core NVFP4 GEMV's weight layout (``mma_gemv.cu`` reads it): the repack of a
ModelOpt weight into MMA fragment words and scale codes, their memory orders, and an emulation of
the kernel's arithmetic on them (tests).

The repack (``repack``) gives lane (g, t) of 16-row tile i, in superstep S (columns 128 S ..
128 S + 127), eight 32-bit words: word u holds the four A-fragment registers of MMA u, i.e. rows
g and g + 8 at four columns of the superstep, two codes a register, at the bits of
``FRAGMENT_BITS``; shape (N / 16, K / 128, 2, 32, 4) int32 (word 4 h + c of lane l at [.., h, l,
c]). Which four columns is the column map (``COLUMNS``; the kernel is built for one, the repack
made for the same):

- ``contiguous``: MMA u's are 32 t + 4 u .. + 3: a lane's 32 columns in one run (its x operand
  64 contiguous bytes of a row) and in two scale groups, 2 t and 2 t + 1. Lane (g, t)'s scale
  word holds rows g, g + 8 of group 8 S + 2 t, then of 8 S + 2 t + 1, as the bytes of one int32.
- ``coalesced``: MMA u = 2 v + w's are 32 v + 8 t + 4 w .. + 3: each of a lane's four 16-byte x
  loads is, with its row's three other lanes', 64 contiguous bytes (a row's two 32-byte sectors
  whole, where ``contiguous`` touches four halves), and a lane's columns lie in four groups, p +
  2 v for v = 0 .. 3 (p = t // 2), which lanes t = 2 p and 2 p + 1 share: lane (g, 2 p + h)'s
  word holds rows g, g + 8 of groups p + 4 h, then p + 4 h + 2, and each reads the pair's two
  words (one 8-byte load).
- ``natural`` (``REPACK_MAPS``; read by the wgmma forms of a natural build alone,
  ``mma_gemv.check_columns``): MMA u's k half h is columns 16 u + 8 h .. + 7 of the superstep,
  lane t's of them 2 t, 2 t + 1, so that each 16-byte row of an 8 x 8 core matrix of the MMA's B
  operand is 16 contiguous bytes of x, as a copy of x straight into shared memory for ``wgmma``
  needs it (docs/nvfp4.md, "What a next wgmma form would need"). MMA u lies in group 8 S + u: a lane's columns touch all eight
  groups of its two rows, and word 4 g + 2 rs + j of a block holds row g + 8 rs's codes of groups
  4 j .. 4 j + 3 (a row's four lanes read the same 16 bytes).

(N / 16, K / 128, 32) scale words in every map. A scale code is the
scale's exponent + 21 (5 bits) and 3 mantissa bits, every e4m3 magnitude exactly (subnormals as
normals): the kernel makes it the bf16 scale * 2^118 in two operations. A block whose scale is 0
gets its codes zeroed (its weights are 0 anyway: every code times a finite multiplier stays 0),
one with a negative scale its codes' signs flipped (the same products); a NaN scale is refused.
``emulate`` decodes the words and codes with the kernel's bit operations and multiplies as the
MMAs do, which checks the repack, the decode and the fragment map on the CPU.
"""

from __future__ import annotations

import torch

SUPERSTEP = 128  #: columns of K a superstep: eight MMAs
LAYOUTS = ("tile", "super", "interleaved")  #: the weights' memory orders (``in_order``)
COLUMN_MAPS = ("contiguous", "coalesced")  #: which columns a lane's MMAs take, as every kernel reads them (module docstring)
#: the maps the repack makes and ``emulate`` reads: ``COLUMN_MAPS``, which every kernel reads, and
#: ``natural``, which the wgmma forms of a natural build alone read (module docstring)
REPACK_MAPS = (*COLUMN_MAPS, "natural")
COLUMNS = "contiguous"  #: the column map ``repack`` makes and ``mma_gemv.build_cubin`` builds for unless told

#: bit places of fragment register r's element ``half`` in a word: (mantissa, exponent bit 0,
#: exponent bit 1, sign), as ``fragments`` in mma_gemv.cu cuts them: register 0 is w & pattern,
#: 1 is (w << 3) & pattern, 2 is (w << 6) & pattern, 3 takes three shifts
FRAGMENT_BITS = (
    ((6, 7, 8, 15), (22, 23, 24, 31)),
    ((3, 4, 5, 12), (19, 20, 21, 28)),
    ((0, 1, 2, 9), (16, 17, 18, 25)),
    ((10, 11, 13, 14), (26, 27, 29, 30)),
)


def nibbles(packed: torch.Tensor) -> torch.Tensor:
    """(N, K/2) uint8 ModelOpt codes (element 2i in the low nibble of byte i) -> (N, K) int64."""
    p = packed.to(torch.int64)
    return torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)


def _check_shape(n: int, k: int) -> None:
    if n % 16 or k % SUPERSTEP:
        raise ValueError(f"the MMA GEMV takes N % 16 == 0 and K % {SUPERSTEP} == 0, got {n} x {k}")


def check_map(columns: str) -> None:
    """Refuses a column map's name that is none of ``REPACK_MAPS``, naming them."""
    if columns not in REPACK_MAPS:
        raise ValueError(f"no column map {columns!r} of the MMA GEMV; the maps are {', '.join(REPACK_MAPS)}")


def column_index(columns: str = COLUMNS) -> torch.Tensor:
    """(4, 8, 4) int64: the superstep column of lane t's MMA u's element c (``2 cp + half``:
    fragment registers 2 cp, 2 cp + 1 hold columns c = 2 cp, 2 cp + 1 of rows g, g + 8)."""
    check_map(columns)
    t, u, c = torch.arange(4)[:, None, None], torch.arange(8)[None, :, None], torch.arange(4)[None, None, :]
    if columns == "contiguous":
        return 32 * t + 4 * u + c
    if columns == "natural":
        return 16 * u + 8 * (c >> 1) + 2 * t + (c & 1)
    return 32 * (u >> 1) + 8 * t + 4 * (u & 1) + c


def _int32(words: torch.Tensor) -> torch.Tensor:
    """int64 values < 2^32 -> int32 with the same bits."""
    return (words - (words >> 31) * (1 << 32)).to(torch.int32).contiguous()


def _scale_values(scales: torch.Tensor) -> torch.Tensor:
    """float64 values of e4m3 scales given as uint8 bits or float8_e4m3fn."""
    return (scales.view(torch.float8_e4m3fn) if scales.dtype == torch.uint8 else scales).double()


def fixed_codes(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``packed`` with the codes of zero-scale blocks zeroed and those of negative-scale blocks
    sign-flipped (module docstring); a NaN scale raises, naming its row and group."""
    value = _scale_values(scales)
    nan = torch.isnan(value)
    if nan.any():
        row, group = (int(i) for i in nan.nonzero()[0])
        raise ValueError(f"the weight's block scale at row {row}, group {group} is NaN: the "
                         "checkpoint is malformed (re-export it); kernel=triton would give NaN too")
    zero, negative = value == 0, value < 0
    if not (zero.any() or negative.any()):
        return packed
    byte_scale = lambda mask: mask.repeat_interleave(8, dim=1)  # noqa: E731 - 8 bytes a group
    out = torch.where(byte_scale(zero), torch.zeros_like(packed), packed)
    return torch.where(byte_scale(negative), out ^ 0x88, out)


def repack_codes(packed: torch.Tensor, rows_at_once: int = 2048, columns: str = COLUMNS) -> torch.Tensor:
    """(N, K/2) uint8 codes -> (N/16, K/128, 2, 32, 4) int32 fragment words (module docstring)
    in column map ``columns``, made ``rows_at_once`` rows at a time (the int64 nibbles of a whole
    24576 x 4096 weight would take 0.8 GB)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    _check_shape(n, k)
    check_map(columns)
    step = max(16, rows_at_once // 16 * 16)
    if n > step:
        return torch.cat([repack_codes(packed[i:i + step], step, columns) for i in range(0, n, step)])
    # row = 16 i + 8 rs + g; register r = 2 cp + rs holds columns 2 cp + half of the lane's MMA u
    if columns == "contiguous":  # column = 128 S + 32 t + 4 u + 2 cp + half
        c = nibbles(packed).view(n // 16, 2, 8, k // SUPERSTEP, 4, 8, 2, 2)  # i rs g S t u cp half
        c = c.permute(0, 3, 2, 4, 5, 6, 1, 7)  # i S g t u cp rs half
    elif columns == "natural":  # column = 128 S + 16 u + 8 cp + 2 t + half
        c = nibbles(packed).view(n // 16, 2, 8, k // SUPERSTEP, 8, 2, 4, 2)  # i rs g S u cp t half
        c = c.permute(0, 3, 2, 6, 4, 5, 1, 7)  # i S g t u cp rs half
    else:  # column = 128 S + 32 v + 8 t + 4 w + 2 cp + half, u = 2 v + w
        c = nibbles(packed).view(n // 16, 2, 8, k // SUPERSTEP, 4, 4, 2, 2, 2)  # i rs g S v t w cp half
        c = c.permute(0, 3, 2, 5, 4, 6, 7, 1, 8).reshape(n // 16, k // SUPERSTEP, 8, 4, 8, 2, 2, 2)
    words = torch.zeros(c.shape[:5], dtype=torch.int64, device=c.device)
    for r, halves in enumerate(FRAGMENT_BITS):
        for half, places in enumerate(halves):
            code = c[:, :, :, :, :, r >> 1, r & 1, half]
            for bit, place in enumerate(places):
                words |= ((code >> bit) & 1) << place
    words = words.view(n // 16, k // SUPERSTEP, 32, 2, 4).transpose(2, 3)  # i S h lane c
    return _int32(words)


def encode_scales(scales: torch.Tensor) -> torch.Tensor:
    """e4m3 scales (uint8 bits or float8_e4m3fn) -> uint8 scale codes of their magnitudes
    (module docstring; 0 -> 0)."""
    value = _scale_values(scales).abs()
    mantissa, exponent = torch.frexp(value)  # value = mantissa * 2^exponent, mantissa in [0.5, 1)
    three = (mantissa * 16 - 8).round().to(torch.int64)  # (1.mmm - 1) * 8
    code = ((exponent.to(torch.int64) - 1 + 21) << 3) | three
    return torch.where(value == 0, 0, code).to(torch.uint8)


def repack_scales(scales: torch.Tensor, columns: str = COLUMNS) -> torch.Tensor:
    """(N, K/16) e4m3 scales -> (N/16, K/128, 32) int32 scale codes in column map ``columns``
    (module docstring)."""
    n, groups = scales.shape
    _check_shape(n, groups * 16)
    check_map(columns)
    code = encode_scales(scales).to(torch.int64)
    if columns == "contiguous":  # lane 4 g + t, byte 2 q + rs: group 8 S + 2 t + q
        code = code.view(n // 16, 2, 8, groups // 8, 4, 2)  # i rs g S t q
        code = code.permute(0, 3, 2, 4, 5, 1)
    elif columns == "natural":  # word 4 g + 2 rs + j, byte b: row g + 8 rs's group 8 S + 4 j + b
        code = code.view(n // 16, 2, 8, groups // 8, 2, 4)  # i rs g S j b
        code = code.permute(0, 3, 2, 1, 4, 5)  # i S g rs j b
    else:  # lane 4 g + 2 p + h, byte 2 q + rs: group 8 S + 4 h + 2 q + p
        code = code.view(n // 16, 2, 8, groups // 8, 2, 2, 2)  # i rs g S h q p
        code = code.permute(0, 3, 2, 6, 4, 5, 1)  # i S g p h q rs
    code = code.reshape(n // 16, groups // 8, 32, 4)
    return _int32((code << (8 * torch.arange(4, device=code.device))).sum(-1))


def repack(packed: torch.Tensor, scales: torch.Tensor, columns: str = COLUMNS) -> tuple[torch.Tensor, torch.Tensor]:
    """(fragment words, scale codes) of a ModelOpt weight in column map ``columns``, as the
    kernel built for it reads them."""
    return repack_codes(fixed_codes(packed, scales), columns=columns), repack_scales(scales, columns)


def _bf16_value(bits: torch.Tensor) -> torch.Tensor:
    """float64 value of 16-bit bf16 patterns (int64)."""
    return _int32(bits << 16).view(torch.float32).double()


def _fragment_bits(w: torch.Tensor) -> list[torch.Tensor]:
    """The kernel's ``fragments``: bf16x2 bits (int64) of registers 0..3 of the words."""
    w = w.to(torch.int64) & 0xFFFFFFFF
    pattern = 0x81C081C0
    r3 = ((w >> 4) & 0x00C000C0) | ((w >> 5) & 0x01000100) | ((w << 1) & 0x80008000)
    return [w & pattern, (w << 3) & pattern, (w << 6) & pattern, r3 & 0xFFFFFFFF]


def _multiplier_values(codes: torch.Tensor) -> torch.Tensor:
    """The kernel's ``multiplier`` of each scale code byte: float64 values (scale * 2^118)."""
    return _bf16_value((codes.to(torch.int64) << 4) | 0x7000)


def lane_scale_codes(scale_codes: torch.Tensor, columns: str = COLUMNS) -> torch.Tensor:
    """(tiles, supers, 8 g, 4 t, 8 u, 2 rs) int64: the scale code lane (g, t) multiplies MMA u's
    row g + 8 rs by, taken from the scale words as the kernel takes them (module docstring)."""
    check_map(columns)
    tiles, supers = scale_codes.shape[:2]
    sc = scale_codes.to(torch.int64).reshape(tiles, supers, 8, 4) & 0xFFFFFFFF  # i S g t
    if columns == "natural":  # MMA u's group u: word 2 rs + u // 4 of the row's four, byte u % 4
        u = torch.arange(8, device=sc.device)
        codes = torch.stack([(sc[..., 2 * rs + (u >> 2)] >> (8 * (u & 3))) & 0xFF for rs in range(2)], -1)  # i S g u rs
        return codes[:, :, :, None].expand(tiles, supers, 8, 4, 8, 2)
    t, u = torch.arange(4)[:, None], torch.arange(8)[None, :]
    if columns == "contiguous":  # the lane's own word: group u // 4, byte 2 (u // 4) + rs
        source, byte = t.expand(4, 8), (2 * (u >> 2)).expand(4, 8)
    else:  # the pair's word h = v // 2 (v = u // 2), byte 2 (v % 2) + rs
        source, byte = 2 * (t >> 1) + (u >> 2), (2 * ((u >> 1) & 1)).expand(4, 8)
    word = sc[:, :, :, source.to(sc.device)]  # i S g t u
    shifts = 8 * (byte.to(sc.device)[..., None] + torch.arange(2, device=sc.device))  # t u rs
    return (word[..., None] >> shifts) & 0xFF


def dense_weight(words: torch.Tensor, scale_codes: torch.Tensor, columns: str = COLUMNS) -> torch.Tensor:
    """(N, K) float64: the A elements the kernel feeds its MMAs (e2m1 * scale * 2^-8), each the
    bf16 product of its fragment value and its multiplier, rounded to bf16 as the kernel's
    multiply rounds (no change where the module docstring's exactness holds), in W's places
    (column map ``columns``)."""
    tiles, supers = words.shape[:2]
    w = words.transpose(2, 3).reshape(tiles, supers, 8, 4, 8)  # i S g t u  (u = 4 h + c)
    codes = lane_scale_codes(scale_codes, columns)  # i S g t u rs
    a = torch.zeros(tiles, 16, supers, 4, 8, 4, dtype=torch.float64, device=words.device)  # i row S t u c
    for r, bits in enumerate(_fragment_bits(w)):
        rs, cp = r & 1, r >> 1
        mult = _multiplier_values(codes[..., rs])  # i S g t u
        for half in range(2):
            frag = _bf16_value((bits >> (16 * half)) & 0xFFFF)
            prod = (frag * mult).to(torch.bfloat16).double()
            a[:, 8 * rs:8 * rs + 8, :, :, :, 2 * cp + half] = prod.permute(0, 2, 1, 3, 4)
    dense = torch.zeros(tiles, 16, supers, SUPERSTEP, dtype=torch.float64, device=words.device)
    dense[..., column_index(columns).flatten().to(words.device)] = a.reshape(tiles, 16, supers, SUPERSTEP)
    return dense.reshape(tiles * 16, supers * SUPERSTEP)


def emulate(words: torch.Tensor, scale_codes: torch.Tensor, x: torch.Tensor, columns: str = COLUMNS) -> torch.Tensor:
    """(M, N) float64: the kernel's sums, one split (the MMAs' sums exact, times 2^8 as the
    kernel ends)."""
    return (x.double() @ dense_weight(words, scale_codes, columns).t()) * 256.0


def dequantize(words: torch.Tensor, scale_codes: torch.Tensor, row_scale: torch.Tensor,
               pair_tiles: int = 0, columns: str = COLUMNS) -> torch.Tensor:
    """(N, K) bf16: what ``mma_gemv.cu``'s dequantizing kernels (``DEQUANTS``) write, ``bf16(float32(e2m1 *
    scale * row_scale))`` (the exact product rounded to float32, then to bf16), ``row_scale`` in
    the words' row order, rows in W's (``pair_tiles``: [gate | up] again)."""
    exact = dense_weight(words, scale_codes, columns) * 256.0 * row_scale.double()[:, None]  # <= 30 bits: exact
    w = exact.float().to(torch.bfloat16)
    return w[torch.argsort(pair_rows(w.shape[0]))] if pair_tiles else w


def pair_rows(n: int) -> torch.Tensor:
    """The weight rows of a fused ``[gate | up]`` (N rows, two halves of N / 2, each a multiple of
    16) in the kernel's paired order: kernel tile 2j is gate tile j, tile 2j + 1 up tile j, so a
    gated GEMV (``mma_gemv.cu``'s ``Epilogue``, ``pair_tiles``) finds both halves of output
    columns 16j .. 16j + 15 in neighbouring tiles. ``weight[pair_rows(n)]`` is that order."""
    if n % 32:
        raise ValueError(f"a paired [gate | up] weight has two halves of whole 16-row tiles: "
                         f"N = {n} is not a multiple of 32")
    return torch.arange(n).view(2, n // 32, 16).transpose(0, 1).reshape(n)


def superstep_major(t: torch.Tensor) -> torch.Tensor:
    """The same (tiles, supersteps, ...) view of ``repack``'s words or scale codes, its memory
    superstep-major: the warps working on one superstep at a moment read one stretch of memory
    rather than one stretch a tile."""
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def interleave(words: torch.Tensor, scale_codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same words and scale codes as views into one (tiles, supersteps, 288) int32 tensor:
    each (tile, superstep) block's 256 words, then its 32 scale codes (1152 contiguous bytes),
    tile-major, so that a warp reads one stream a tile rather than two."""
    tiles, supers = words.shape[:2]
    both = torch.cat([words.reshape(tiles, supers, 256), scale_codes], dim=2)
    return both[..., :256].unflatten(2, (2, 32, 4)), both[..., 256:]


def in_order(words: torch.Tensor, scale_codes: torch.Tensor, order: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``repack``'s (tile-major) words and scale codes in memory order ``order``: ``tile`` as
    they are, ``super`` (``superstep_major``) or ``interleaved`` (``interleave``)."""
    if order == "tile":
        return words, scale_codes
    if order == "super":
        return superstep_major(words), superstep_major(scale_codes)
    if order == "interleaved":
        return interleave(words, scale_codes)
    raise ValueError(f"no memory order {order!r} of the MMA GEMV's weights: tile, super or interleaved")


def block_strides(words: torch.Tensor, scale_codes: torch.Tensor) -> tuple[int, int, int, int]:
    """(code tile stride, code superstep stride, scale tile stride, scale superstep stride) in
    16-byte units, of ``repack``'s words (a (tile, superstep) block of 256 int32) and scale codes
    (of 32 int32) in any of the memory orders here, each block contiguous and 16-byte aligned."""
    inner_w = words.shape[2:] == (2, 32, 4) and words.stride()[2:] == (128, 4, 1)
    inner_c = scale_codes.shape[2:] == (32,) and scale_codes.stride(2) == 1
    strides = (*words.stride()[:2], *scale_codes.stride()[:2])
    aligned = (words.data_ptr() % 16 == 0 and scale_codes.data_ptr() % 16 == 0
               and all(st % 4 == 0 for st in strides))
    if not (inner_w and inner_c and aligned and words.shape[:2] == scale_codes.shape[:2]):
        raise ValueError(f"the words {tuple(words.shape)} (strides {words.stride()}) and scale codes "
                         f"{tuple(scale_codes.shape)} (strides {scale_codes.stride()}) are not "
                         "repack's blocks, contiguous and 16-byte aligned (use repack, optionally "
                         "superstep_major or interleave)")
    return tuple(st // 4 for st in strides)
