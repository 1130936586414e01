"""NVFP4 decode GEMVs on the tensor cores (``mma_gemv.cu``, M <= 8 rows of x): the weight repack
into MMA fragment words and scale codes, an emulation of the kernel's arithmetic (tests), its
nvcc build (cached on disk), and a CUDA driver-API launcher. ``kernel = "mma"``
(``hinge_nvfp4.kernels.MmaKernel``, experimental) runs it for decode GEMVs;
``tools/gpu/nvfp4_mma_probe.py`` times it against the Triton GEMV.

The repack (``repack``) gives lane (g, t) of 16-row tile i, in superstep S (columns 128 S ..
128 S + 127), eight 32-bit words: word u holds the four A-fragment registers of MMA u, i.e. rows
g and g + 8 at columns 128 S + 32 t + 4 u .. + 3 (the kernel's docstring says why these), two
codes a register, at the bits of ``FRAGMENT_BITS``; shape (N / 16, K / 128, 2, 32, 4) int32
(word 4 h + c of lane l at [.., h, l, c]). And four scale codes: rows g, g + 8 of groups
8 S + 2 t, then 8 S + 2 t + 1, as bytes of one int32, (N / 16, K / 128, 32). A scale code is the
scale's exponent + 21 (5 bits) and 3 mantissa bits, every e4m3 magnitude exactly (subnormals as
normals): the kernel makes it the bf16 scale * 2^118 in two operations. A block whose scale is 0
gets its codes zeroed (its weights are 0 anyway: every code times a finite multiplier stays 0),
one with a negative scale its codes' signs flipped (the same products); a NaN scale is refused.
``emulate`` decodes the words and codes with the kernel's bit operations and multiplies as the
MMAs do, which checks the repack, the decode and the fragment map on the CPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("mma_gemv.cu")
MAX_ROWS = 8  #: rows of x: the MMA's B columns
WARPS = 4  #: 16-row tiles a block (``WARPS`` in mma_gemv.cu)
SUPERSTEP = 128  #: columns of K a superstep: eight MMAs
RING_STAGES = (4, 8)  #: the cp.async rings' depths (supersteps) ``MmaKernel`` builds
MAX_STAGES = 10  #: the rings of 4 warps in 48 KiB of static shared memory (1152 bytes a stage)

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


def _int32(words: torch.Tensor) -> torch.Tensor:
    """int64 values < 2^32 -> int32 with the same bits."""
    return (words - (words >> 31) * (1 << 32)).to(torch.int32).contiguous()


def fixed_codes(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``packed`` with the codes of zero-scale blocks zeroed and those of negative-scale blocks
    sign-flipped (module docstring); a NaN scale raises, naming its row and group."""
    value = scales.view(torch.float8_e4m3fn).float() if scales.dtype == torch.uint8 else scales.float()
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


def repack_codes(packed: torch.Tensor, rows_at_once: int = 2048) -> torch.Tensor:
    """(N, K/2) uint8 codes -> (N/16, K/128, 2, 32, 4) int32 fragment words (module docstring),
    made ``rows_at_once`` rows at a time (the int64 nibbles of a whole 24576 x 4096 weight would
    take 0.8 GB)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    _check_shape(n, k)
    step = max(16, rows_at_once // 16 * 16)
    if n > step:
        return torch.cat([repack_codes(packed[i:i + step], step) for i in range(0, n, step)])
    # row = 16 i + 8 rs + g; column = 128 S + 32 t + 4 u + 2 cp + half; register r = 2 cp + rs
    c = nibbles(packed).view(n // 16, 2, 8, k // SUPERSTEP, 4, 8, 2, 2)  # i rs g S t u cp half
    c = c.permute(0, 3, 2, 4, 5, 6, 1, 7)  # i S g t u cp rs half
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
    value = (scales.view(torch.float8_e4m3fn) if scales.dtype == torch.uint8 else scales).double().abs()
    mantissa, exponent = torch.frexp(value)  # value = mantissa * 2^exponent, mantissa in [0.5, 1)
    three = (mantissa * 16 - 8).round().to(torch.int64)  # (1.mmm - 1) * 8
    code = ((exponent.to(torch.int64) - 1 + 21) << 3) | three
    return torch.where(value == 0, 0, code).to(torch.uint8)


def repack_scales(scales: torch.Tensor) -> torch.Tensor:
    """(N, K/16) e4m3 scales -> (N/16, K/128, 32) int32 scale codes (module docstring)."""
    n, groups = scales.shape
    _check_shape(n, groups * 16)
    code = encode_scales(scales).to(torch.int64).view(n // 16, 2, 8, groups // 8, 4, 2)  # i rs g S t q
    code = code.permute(0, 3, 2, 4, 5, 1).reshape(n // 16, groups // 8, 32, 4)  # byte = 2 q + rs
    return _int32((code << (8 * torch.arange(4, device=code.device))).sum(-1))


def repack(packed: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(fragment words, scale codes) of a ModelOpt weight, as the kernel reads them."""
    return repack_codes(fixed_codes(packed, scales)), repack_scales(scales)


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


def dense_weight(words: torch.Tensor, scale_codes: torch.Tensor) -> torch.Tensor:
    """(N, K) float64: the A elements the kernel feeds its MMAs (e2m1 * scale * 2^-8), each the
    bf16 product of its fragment value and its multiplier, rounded to bf16 as the kernel's
    multiply rounds (no change where the module docstring's exactness holds), in W's places."""
    tiles, supers = words.shape[:2]
    w = words.transpose(2, 3).reshape(tiles, supers, 8, 4, 8)  # i S g t u  (u = 4 h + c)
    sc = scale_codes.to(torch.int64).reshape(tiles, supers, 8, 4)  # i S g t
    a = torch.zeros(tiles, 16, supers, 4, 8, 4, dtype=torch.float64, device=words.device)  # i row S t u col
    for r, bits in enumerate(_fragment_bits(w)):
        rs, cp = r & 1, r >> 1
        for group in range(2):  # MMAs 0..3 take the lane's first group, 4..7 its second
            byte = (sc >> (8 * (2 * group + rs))) & 0xFF
            mult = _multiplier_values(byte)[..., None]  # i S g t 1
            us = slice(4 * group, 4 * group + 4)
            for half in range(2):
                frag = _bf16_value((bits[..., us] >> (16 * half)) & 0xFFFF)
                prod = (frag * mult).to(torch.bfloat16).double()
                a[:, 8 * rs:8 * rs + 8, :, :, us, 2 * cp + half] = prod.permute(0, 2, 1, 3, 4)
    return a.reshape(tiles * 16, supers * SUPERSTEP)  # columns 128 S + 32 t + 4 u + col


def emulate(words: torch.Tensor, scale_codes: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(M, N) float64: the kernel's sums, one split (the MMAs' sums exact, times 2^8 as the
    kernel ends)."""
    return (x.double() @ dense_weight(words, scale_codes).t()) * 256.0


#: the kernel's two forms: reading a superstep out of the ring at its top, or one superstep ahead
KERNELS = {"plain": "nvfp4_mma_gemv", "ahead": "nvfp4_mma_gemv_ahead"}
#: two diagnostics, no GEMV: the memory side alone (the math a XOR fold) and the arithmetic
#: alone (every superstep from one copied once); ``nvfp4_mma_probe.py --diagnose`` times them
DIAGNOSTICS = {"ring": "nvfp4_mma_gemv_ring", "math": "nvfp4_mma_gemv_math"}


def build_cubin(arch: str = "sm_90", stages: int = 4) -> bytes:
    """``mma_gemv.cu`` compiled by nvcc for ``arch``, its cp.async ring ``stages`` supersteps
    deep (2 .. ``MAX_STAGES``); needs nvcc on PATH."""
    if not 2 <= stages <= MAX_STAGES:
        raise ValueError(f"the cp.async ring takes 2 to {MAX_STAGES} stages (static shared "
                         f"memory), got {stages}")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH: hinge_nvfp4's MMA GEMV kernels compile with "
                                "it (install the CUDA toolkit, or use kernel=triton)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "nvfp4_mma_gemv.cubin"
        done = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-O3", f"-DSTAGES={stages}", "-o",
                               str(out), str(SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc could not build {SOURCE.name} for {arch} (STAGES={stages}), exit "
                               f"{done.returncode}:\n{done.stderr[-2000:]}\nuse kernel=triton meanwhile")
        return out.read_bytes()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hinge/nvfp4_mma`` (``~/.cache/...``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hinge" / "nvfp4_mma"


def cached_cubin(arch: str, stages: int = 4, cache_dir: Path | None = None) -> bytes:
    """``build_cubin``, kept on disk under a key of the source, the arch and the stages (nvcc
    takes a few seconds; a start-up should not pay it twice)."""
    key = hashlib.sha256(SOURCE.read_bytes() + f"{arch}:{stages}".encode()).hexdigest()[:24]
    path = (cache_dir or default_cache_dir()) / f"mma_gemv-{arch}-{stages}-{key}.cubin"
    if path.exists():
        return path.read_bytes()
    cubin = build_cubin(arch, stages)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(cubin)
    partial.replace(path)  # atomic: a concurrent start-up reads a whole file or builds its own
    return cubin


class MmaGemv:
    """The compiled kernel, loaded through the CUDA driver API into torch's current context and
    launched on torch's current stream (so a CUDA graph captures it)."""

    def __init__(self, cubin: bytes, form: str = "plain") -> None:
        names = KERNELS | DIAGNOSTICS
        if form not in names:
            raise ValueError(f"no form {form!r} of the MMA GEMV; the forms are {', '.join(names)}")
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self._counters: torch.Tensor | None = None  #: split counters (``reserve_counters``)
        self._make_torch_context_current()
        self.module = ctypes.c_void_p()
        self.function = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), cubin), "cuModuleLoadData")
        self._check(self.cuda.cuModuleGetFunction(ctypes.byref(self.function), self.module,
                                                  names[form].encode()), "cuModuleGetFunction")

    def _make_torch_context_current(self) -> None:
        """The driver API loads into this thread's current context: torch's primary context, made
        current here (``torch.cuda.is_available()`` creates none; a module load without one fails
        with error 201, CUDA_ERROR_INVALID_CONTEXT, as the H200 showed on 2026-12-02)."""
        torch.zeros(1, device="cuda")  # torch creates its primary context and makes it current
        context = ctypes.c_void_p()
        self._check(self.cuda.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
        if not context.value:
            device = ctypes.c_int()
            self._check(self.cuda.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()),
                        "cuDeviceGet")
            self._check(self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                        "cuDevicePrimaryCtxRetain")
            self._check(self.cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA driver error {code}")

    def reserve_counters(self, tiles: int, device: torch.device) -> None:
        """Room for ``tiles`` 16-row tiles' split counters (zeros; each launch leaves them zero):
        call it outside a CUDA graph capture, for the largest weight a split launch will see."""
        have = self._counters
        if have is None or have.numel() < tiles or have.device != torch.device(device):
            self._counters = torch.zeros(max(tiles, have.numel() if have is not None else 0),
                                         dtype=torch.int32, device=device)

    def __call__(self, words: torch.Tensor, scale_codes: torch.Tensor, x: torch.Tensor,
                 part: torch.Tensor | None, groups_per_split: int, *,
                 row_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """One launch over ``ceil(K / 16 / groups_per_split)`` splits of K, from ``repack``'s
        words and scale codes and x (M, K) bf16 (contiguous, 16-byte aligned). Without ``out``:
        ``part`` (splits, M, N) float32 gets each split's sums; returns it. With ``out`` (M, N)
        bf16 and ``row_scale`` (N,) float32: out = sum * row_scale (+ ``bias`` (N,) bf16), the
        splits added in the kernel through ``part`` (a (splits, M, N) float32 workspace; None
        for one split) and the reserved counters; returns ``out``."""
        n, k, m = words.shape[0] * 16, x.shape[1], x.shape[0]
        if groups_per_split % 8 or groups_per_split <= 0:
            raise ValueError(f"groups_per_split must be a positive multiple of 8 (a superstep), "
                             f"got {groups_per_split}")
        if not (x.is_contiguous() and x.dtype == torch.bfloat16 and x.data_ptr() % 16 == 0
                and 1 <= m <= MAX_ROWS and k == words.shape[1] * SUPERSTEP):
            raise ValueError(f"x must be a contiguous 16-byte aligned ({MAX_ROWS} rows at most, "
                             f"{words.shape[1] * SUPERSTEP} columns) bf16 tensor, got "
                             f"{tuple(x.shape)} {x.dtype}")
        splits = -(-(k // 16) // groups_per_split)
        if out is not None:
            if row_scale is None or out.dtype != torch.bfloat16 or out.shape != (m, n):
                raise ValueError(f"the fused epilogue takes row_scale and a ({m}, {n}) bf16 out; got "
                                 f"{None if row_scale is None else 'row_scale'}, {tuple(out.shape)} {out.dtype}")
            if splits > 1 and (self._counters is None or self._counters.numel() < n // 16):
                raise ValueError(f"{splits} splits need counters for {n // 16} tiles: call "
                                 "reserve_counters first (outside a graph capture)")
        if (out is None or splits > 1) and (part is None or part.dtype != torch.float32
                                            or part.shape != (splits, m, n)):
            raise ValueError(f"part must be a ({splits}, {m}, {n}) float32 tensor for {splits} splits")

        def ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
            return ctypes.c_void_p(t.data_ptr() if t is not None else 0)

        tile_stride, super_stride = block_strides(words, scale_codes)
        args = [ptr(words), ptr(scale_codes), ptr(x), ptr(part), ctypes.c_int(n), ctypes.c_int(k),
                ctypes.c_int(m), ctypes.c_int(tile_stride), ctypes.c_int(super_stride), ctypes.c_int(groups_per_split), ptr(row_scale), ptr(bias),
                ptr(out), ptr(self._counters)]
        pointers = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                                    for a in args])
        tiles = n // 16
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self.cuda.cuLaunchKernel(
            self.function, -(-tiles // WARPS), splits, 1, 32 * WARPS, 1, 1, 0, stream,
            pointers, None), "cuLaunchKernel")
        return part if out is None else out


def superstep_major(t: torch.Tensor) -> torch.Tensor:
    """The same (tiles, supersteps, ...) view of ``repack``'s words or scale codes, its memory
    superstep-major: the warps working on one superstep at a moment read one stretch of memory
    rather than one stretch a tile."""
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def block_strides(words: torch.Tensor, scale_codes: torch.Tensor) -> tuple[int, int]:
    """(tile stride, superstep stride) in (tile, superstep) blocks of the words (256 int32) and
    scale codes (32 int32), which must share them, each block contiguous."""
    (tw, sw), (tc, sc) = words.stride()[:2], scale_codes.stride()[:2]
    inner_w = words.shape[2:] == (2, 32, 4) and words[0, 0].is_contiguous()
    inner_c = scale_codes.shape[2:] == (32,) and scale_codes.stride(2) == 1
    if not (inner_w and inner_c and tw % 256 == 0 and sw % 256 == 0 and tw // 256 == tc // 32
            and sw // 256 == sc // 32 and words.shape[:2] == scale_codes.shape[:2]):
        raise ValueError(f"the words {tuple(words.shape)} (strides {words.stride()}) and scale codes "
                         f"{tuple(scale_codes.shape)} (strides {scale_codes.stride()}) are not "
                         "repack's blocks at one pair of strides (use repack, optionally "
                         "superstep_major on both)")
    return tw // 256, sw // 256


def ring_stages(groups_per_split: int) -> int:
    """The ring depth for splits of ``groups_per_split`` groups: 8 supersteps for splits of 16 or
    more, else 4 (H200, 2026-12-02, ``nvfp4_mma_probe.py``: the 4- to 12-superstep splits of qkv,
    o and down were fastest at 4, a deep ring only lengthening a short split's start; gate_up's
    one split of 32 supersteps at 8 in the first run, within 1% of 4 in the later ones)."""
    return 8 if groups_per_split // 8 >= 16 else 4


def split_plan(n: int, k: int, num_sms: int, warps_per_sm: int = 8,
               max_splits: int = 8) -> tuple[int, int]:
    """(splits, groups_per_split) for an N x K weight: K split in two until the launch has
    ``warps_per_sm`` warps (16-row tiles x splits) a multiprocessor, at most ``max_splits``
    splits and at least 4 supersteps (32 groups) in each (Qwen3-8B on 132 SMs: gate_up 24576 rows
    in 1 split, qkv 6144 in 4, o and down 4096 in 8)."""
    tiles, groups = n // 16, k // 16
    splits = 1
    while (tiles * splits < warps_per_sm * num_sms and splits < max_splits
           and groups // (2 * splits) >= 32):
        splits *= 2
    per_split = -(-groups // splits)
    per_split = -(-per_split // 8) * 8
    return -(-groups // per_split), per_split
