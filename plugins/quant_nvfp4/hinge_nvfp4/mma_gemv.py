"""NVFP4 decode GEMVs on the tensor cores (``mma_gemv.cu``, M <= 8 rows of x): the weight repack
into MMA fragment words, an emulation of the kernels' fragment arithmetic (tests), their nvcc build
(cached on disk), and a CUDA driver-API launcher. ``kernel = "mma"`` (``hinge_nvfp4.kernels.
MmaKernel``, experimental) runs the cp.async kernel for decode GEMVs; ``tools/gpu/nvfp4_mma_probe.py``
times both kernels against the Triton GEMV.

The repack puts lane (g, t)'s A fragment of tile i (rows 16 i ..) and scale group j as one
32-bit word: nibble ``pair + 4 * half`` holds element ``half`` of fragment register ``pair``
(registers 0..3: rows g, g + 8, g, g + 8 at columns 2t + half, 2t + half, 2t + 8 + half,
2t + 8 + half), and four groups a lane sit side by side (one 16-byte load): shape
(N / 16, K / 64, 32, 4) int32. ``emulate`` decodes those words with the kernel's bit placement
(a bf16 pattern worth e2m1 * 2^-126, times 2^126) into the fragments and multiplies them as the
MMA does, which checks the repack, the decode and the fragment map on the CPU.
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
DEFAULT_STAGES = 8  #: the cp.async ring's depth ``MmaKernel`` builds (one split needs deep rings)


def nibbles(packed: torch.Tensor) -> torch.Tensor:
    """(N, K/2) uint8 ModelOpt codes (element 2i in the low nibble of byte i) -> (N, K) int64."""
    p = packed.to(torch.int64)
    return torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)


def repack_codes(packed: torch.Tensor, rows_at_once: int = 2048) -> torch.Tensor:
    """(N, K/2) uint8 codes -> (N/16, K/64, 32, 4) int32 fragment words (module docstring), made
    ``rows_at_once`` rows at a time (the int64 nibbles of a whole 24576 x 4096 weight would take
    0.8 GB)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    if n % 16 or k % 64:
        raise ValueError(f"the MMA GEMV takes N % 16 == 0 and K % 64 == 0, got {n} x {k}")
    step = max(16, rows_at_once // 16 * 16)
    if n > step:
        return torch.cat([repack_codes(packed[i:i + step], step) for i in range(0, n, step)])
    c = nibbles(packed).view(n // 16, 2, 8, k // 16, 2, 4, 2)  # i, rowsel, g, j, colhalf, t, half
    c = c.permute(0, 3, 2, 5, 6, 4, 1)  # i, j, g, t, half, colhalf, rowsel: nibble = 4h + 2c + r
    c = c.reshape(n // 16, k // 16, 32, 8)
    words = (c << (4 * torch.arange(8, device=c.device))).sum(-1)  # < 2^32
    words = words.view(n // 16, k // 64, 4, 32).transpose(2, 3)  # four groups a lane together
    return (words - (words >> 31) * (1 << 32)).to(torch.int32).contiguous()


def _fragment_bits(words: torch.Tensor, pair: int) -> torch.Tensor:
    """The kernel's ``fragment<pair>``: bf16x2 bits of register ``pair`` (int64, 32 bits)."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    mag = (w << (6 - 4 * pair)) if 4 * pair <= 6 else (w >> (4 * pair - 6))
    sign = w << (12 - 4 * pair)
    return ((mag & 0x01C001C0) | (sign & 0x80008000)) & 0xFFFFFFFF


def _bf16_value(bits: torch.Tensor) -> torch.Tensor:
    """float64 value of 16-bit bf16 patterns."""
    f32 = (bits << 16).to(torch.int64)
    f32 = f32 - (f32 >> 31) * (1 << 32)
    return f32.to(torch.int32).view(torch.float32).double()


def fragments(words: torch.Tensor) -> torch.Tensor:
    """(N/16, K/64, 32, 4) words -> (N/16, K/16, 16, 16) float64 A tiles, decoded as the kernel
    does (times 2^126) and placed by the m16n8k16 A-fragment map."""
    tiles, quads = words.shape[:2]
    w = words.transpose(2, 3).reshape(tiles, quads * 4, 8, 4)  # i, j, g, t
    a = torch.zeros(tiles, quads * 4, 16, 16, dtype=torch.float64, device=words.device)
    g = torch.arange(8, device=words.device)[:, None]
    t = torch.arange(4, device=words.device)[None, :]
    for pair in range(4):
        bits = _fragment_bits(w, pair)
        rows = g + 8 * (pair & 1)
        cols = 2 * t + 8 * (pair >> 1)
        for half in range(2):
            value = _bf16_value((bits >> (16 * half)) & 0xFFFF) * 2.0**126
            a[:, :, rows.expand(8, 4), (cols + half).expand(8, 4)] = value
    return a


def e4m3_values(scales: torch.Tensor) -> torch.Tensor:
    """float64 of non-negative e4m3 bits (uint8), as the kernel reads them."""
    return scales.view(torch.float8_e4m3fn).double() if scales.dtype == torch.uint8 else scales.double()


def emulate(words: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(M, N) float64: the kernel's sum over groups of scale * (A tile @ x's group), one split."""
    a = fragments(words)  # i, j, 16, 16
    tiles, groups = a.shape[:2]
    m = x.shape[0]
    xs = x.double().view(m, groups, 16)  # c, j, k
    d = torch.einsum("ijrk,cjk->ijrc", a, xs)  # the MMA of each (tile, group)
    s = e4m3_values(scales).view(tiles, 16, groups).permute(0, 2, 1)  # i, j, r
    return (d * s[..., None]).sum(1).reshape(tiles * 16, m).t()


KERNELS = ("nvfp4_mma_gemv", "nvfp4_mma_gemv_async")  #: register loads; cp.async ring


def build_cubin(arch: str = "sm_90", stages: int = 4) -> bytes:
    """``mma_gemv.cu`` (both kernels) compiled by nvcc for ``arch``, the async kernel's ring
    ``stages`` steps deep; needs nvcc on PATH."""
    if stages < 2:
        raise ValueError(f"the cp.async ring needs at least 2 stages, got {stages}")
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

    def __init__(self, cubin: bytes, warps: int = 4, kernel: str = KERNELS[0]) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"no kernel {kernel!r} in mma_gemv.cu; it has {', '.join(KERNELS)}")
        if kernel == KERNELS[1] and warps > 4:
            raise ValueError(f"{kernel} has shared rings for 4 warps a block, got {warps}")
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.warps = warps
        self._counters: torch.Tensor | None = None  #: split counters (``reserve_counters``)
        self._make_torch_context_current()
        self.module = ctypes.c_void_p()
        self.function = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), cubin), "cuModuleLoadData")
        self._check(self.cuda.cuModuleGetFunction(ctypes.byref(self.function), self.module,
                                                  kernel.encode()), "cuModuleGetFunction")

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

    def __call__(self, words: torch.Tensor, scales: torch.Tensor, x: torch.Tensor,
                 part: torch.Tensor | None, groups_per_split: int, *,
                 row_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """One launch over ``ceil(K / 16 / groups_per_split)`` splits of K. Without ``out``:
        ``part`` (splits, M, N) float32 gets each split's sums; returns it. With ``out`` (M, N)
        bf16 and ``row_scale`` (N,) float32: out = sum * row_scale (+ ``bias`` (N,) bf16), the
        splits added in the kernel through ``part`` (a (splits, M, N) float32 workspace; None
        for one split) and the reserved counters; returns ``out``."""
        n, k, m = scales.shape[0], x.shape[1], x.shape[0]
        if groups_per_split % 4:
            raise ValueError(f"groups_per_split must be a multiple of 4 (a step), got {groups_per_split}")
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

        args = [ptr(words), ptr(scales), ptr(x), ptr(part), ctypes.c_int(n), ctypes.c_int(k),
                ctypes.c_int(m), ctypes.c_int(groups_per_split), ptr(row_scale), ptr(bias),
                ptr(out), ptr(self._counters)]
        pointers = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                                    for a in args])
        tiles = n // 16
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self.cuda.cuLaunchKernel(
            self.function, -(-tiles // self.warps), splits, 1, 32 * self.warps, 1, 1, 0, stream,
            pointers, None), "cuLaunchKernel")
        return part if out is None else out


def split_plan(n: int, k: int, num_sms: int, warps_per_sm: int = 8,
               max_splits: int = 8) -> tuple[int, int]:
    """(splits, groups_per_split) for an N x K weight: K split in two until the launch has
    ``warps_per_sm`` warps (16-row tiles x splits) a multiprocessor, at most ``max_splits``
    splits and at least 8 steps of four groups in each (Qwen3-8B on 132 SMs: gate_up 24576 rows
    in 1 split, qkv 6144 in 4, o and down 4096 in 8)."""
    tiles, groups = n // 16, k // 16
    splits = 1
    while (tiles * splits < warps_per_sm * num_sms and splits < max_splits
           and groups // (2 * splits) >= 32):
        splits *= 2
    per_split = -(-groups // splits)
    per_split = -(-per_split // 4) * 4
    return -(-groups // per_split), per_split
