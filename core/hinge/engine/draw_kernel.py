"""``draw.uniform_noise`` on CUDA in one Triton kernel: the per-(row, token id) hash and its
uniform, with the torch path's integer ops in int64 (every product below 2**59, so no
wrap-around) and its exact float conversion, hence the same bits on every device. One program
per (row, ``BLOCK`` ids). Graph-capturable (no host syncs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _mix(x):
    x = x ^ (x >> 16)
    x = (x * 0x045D9F3B) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    x = (x * 0x045D9F3B) & 0xFFFFFFFF
    return x ^ (x >> 16)


# NOTE: nothing specializes on the values a request picks: ``n`` is its candidate count (top_k +
# a margin, any value) and ``keys`` may be a row slice of the step's keys (8-byte aligned), so one
# compiled kernel serves every request and the start-up warm-up compiles it (test_warmup_gpu.py).
@triton.jit(do_not_specialize=("n", "stride_ids", "stride_out"),
            do_not_specialize_on_alignment=("keys_ptr",))
def _hash_uniform_kernel(keys_ptr, ids_ptr, out_ptr, n, stride_ids, stride_out,
                         ARANGE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    key = tl.load(keys_ptr + row).to(tl.int64)
    if ARANGE:
        ids = cols.to(tl.int64)
    else:
        ids = tl.load(ids_ptr + row * stride_ids + cols, mask=mask, other=0).to(tl.int64)
    h = _mix(key ^ ((ids * 0x9E3779B1) & 0xFFFFFFFF))
    u = ((h >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)
    tl.store(out_ptr + row * stride_out + cols, u, mask=mask)


def hash_uniform(keys: torch.Tensor, token_ids: int | torch.Tensor) -> torch.Tensor:
    """(B, N) float32 uniforms: ``draw.uniform_noise``'s contract (ids an int V, (N,) or (B, N))."""
    b = keys.shape[0]
    arange = isinstance(token_ids, int)
    if arange:
        n, ids, stride = token_ids, keys, 0
    else:
        ids = token_ids if token_ids.stride(-1) == 1 else token_ids.contiguous()
        n = ids.shape[-1]
        stride = ids.stride(0) if ids.dim() == 2 else 0  # (N,): every row reads the same ids
    out = torch.empty(b, n, dtype=torch.float32, device=keys.device)
    if b and n:
        _hash_uniform_kernel[(b, triton.cdiv(n, BLOCK))](
            keys, ids, out, n, stride, out.stride(0), ARANGE=arange, BLOCK=BLOCK, num_warps=4)
    return out
