"""Storing a step's keys and values in the paged KV pool: the one write every attention backend
makes (built-in and plugin alike), so they all store the same way.

``write_kv(kv, layer_id, loc, k, v)``: ``kv.k[layer_id][loc] = k`` and ``kv.v[layer_id][loc] = v``,
cast to the pool's dtype. On CUDA, when the shapes and dtypes allow it, one Triton kernel writes
both (``fast_triton.kv_write``): two ``index_copy_`` launches per layer were 72 launches and
171 us of a 5240 us Qwen3-8B batch-1 decode step on the H200 (docs/benchmarks.md, fifth session).
The kernel is a copy, so it runs in deterministic mode too; ``HINGE_FAST_KERNELS=0`` turns it off
with the other fast kernels. Everywhere else (CPU, a dtype cast, odd strides): ``index_copy_``.
"""

from __future__ import annotations

import torch

from hinge.forward import KVCache
from hinge.layers import fast_triton


def write_kv(kv: KVCache, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Keys and values (T, Hk, D) of this step into slots ``loc`` (T,) of attention layer
    ``layer_id``'s pool tensors."""
    k_cache, v_cache = kv.k[layer_id], kv.v[layer_id]
    if fast_triton.enabled(k):  # NOTE: not deterministic-gated: a copy has no rounding to vary
        kernel = fast_triton.kernels().kv_write
        if kernel.supports(k_cache, v_cache, loc, k, v):
            kernel.kv_write(k_cache, v_cache, loc, k, v)
            return
    k_cache.index_copy_(0, loc, k if k.dtype == k_cache.dtype else k.to(k_cache.dtype))
    v_cache.index_copy_(0, loc, v if v.dtype == v_cache.dtype else v.to(v_cache.dtype))
