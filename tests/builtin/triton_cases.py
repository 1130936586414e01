"""Shared helpers of the ``triton`` attention tests: backends on CPU (Triton's interpreter) or
CUDA, and one request's output rows from a batch built by the kit (``hinge.testing.batches``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from hinge.builtin.plugin import TRITON_ATTENTION
from hinge.contracts import AttentionLayer
from hinge.plugins.specs import BuildContext
from hinge.testing.batches import BatchCase, build_batch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def make_backend(device: str = "cpu", dtype: torch.dtype = torch.float32, page_size: int = 16,
                 **options):
    build = BuildContext(device=device, dtype=dtype, deterministic=True, page_size=page_size)
    return TRITON_ATTENTION.build(TRITON_ATTENTION.validate_options(options), build)


def make_layer(num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 16,
               window: int | None = None) -> AttentionLayer:
    return AttentionLayer(kv_layer_id=0, num_heads=num_heads, num_kv_heads=num_kv_heads,
                          head_dim=head_dim, scale=head_dim ** -0.5, sliding_window=window)


def run(backend, case: BatchCase) -> torch.Tensor:
    case.batch.attn_metadata = backend.prepare_metadata(case.batch)
    return backend.forward(case.q, case.k, case.v, case.layer, case.kv, case.batch)


def rows_of(backend, layer: AttentionLayer, prefix: Sequence[int], extend: Sequence[int],
            index: int, seeds: Sequence[int], *, device: str = "cpu",
            dtype: torch.dtype = torch.float32, page_size: int = 16) -> torch.Tensor:
    """Output rows of request ``index`` of a batch (request data drawn from its seed)."""
    case = build_batch(prefix, extend, layer=layer, page_size=page_size, dtype=dtype,
                       device=device, seeds=seeds)
    return run(backend, case)[case.rows_of(index)].cpu()


def assert_same_query_bits(backend, layer: AttentionLayer, n: int, *, device: str = "cpu",
                           dtype: torch.dtype = torch.float32, page_size: int = 16) -> None:
    """A request of ``n`` tokens (data seed 42) gives the same bits alone, batched, chunked, and
    for its last rows run as decode and verify steps (each beside another request)."""

    def rows(prefix, extend, index, seeds):
        return rows_of(backend, layer, prefix, extend, index, seeds, device=device, dtype=dtype,
                       page_size=page_size)

    alone = rows([0], [n], 0, [42])
    assert torch.isfinite(alone).all()
    batched = rows([5, 0, 12], [3, n, 1], 1, [1, 42, 2])
    assert torch.equal(alone, batched), "a request's output changed when batched with others"
    cut = n // 3
    chunked = rows([cut, 2], [n - cut, 9], 0, [42, 3])
    assert torch.equal(alone[cut:], chunked), f"output changed when the prompt was split at {cut}"
    decode = rows([17, n - 1, 3], [1, 1, 1], 1, [4, 42, 5])
    assert torch.equal(alone[n - 1:], decode), "a decode row differs from the same row in prefill"
    verify = rows([n - 4, 9], [4, 4], 0, [42, 6])
    assert torch.equal(alone[n - 4:], verify), "a verify step differs from the same rows in prefill"
