"""A row's bits from the deterministic kernels do not depend on its batch or its place in it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hinge.layers import batch_invariant

SIZES_AND_OFFSETS = [(1, 0), (3, 2), (16, 15), (17, 16), (40, 9), (100, 63), (257, 130)]


def rows(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def embed(target: torch.Tensor, n: int, offset: int, seed: int) -> torch.Tensor:
    batch = rows(n, target.shape[-1], seed)
    batch[offset] = target
    return batch


@pytest.mark.parametrize("n,offset", SIZES_AND_OFFSETS)
def test_linear_row_bit_identical_alone_and_in_any_batch(n, offset):
    w, b, x = rows(96, 256, 1), rows(1, 96, 2)[0], rows(1, 256, 3)
    alone = batch_invariant.linear(x, w, b)
    inside = batch_invariant.linear(embed(x[0], n, offset, 4 + n), w, b)[offset : offset + 1]
    assert torch.equal(alone, inside)


@pytest.mark.parametrize("n,offset", SIZES_AND_OFFSETS)
def test_rmsnorm_row_bit_identical_alone_and_in_any_batch(n, offset):
    w, x = rows(1, 192, 5)[0], rows(1, 192, 6)
    alone = batch_invariant.rmsnorm(x, w, 1e-6)
    inside = batch_invariant.rmsnorm(embed(x[0], n, offset, 7 + n), w, 1e-6)[offset : offset + 1]
    assert torch.equal(alone, inside)


@pytest.mark.parametrize("n,offset", SIZES_AND_OFFSETS)
def test_log_softmax_row_bit_identical_alone_and_in_any_batch(n, offset):
    x = rows(1, 1000, 8) * 5
    alone = batch_invariant.log_softmax(x)
    inside = batch_invariant.log_softmax(embed(x[0], n, offset, 9 + n))[offset : offset + 1]
    assert torch.equal(alone, inside)


def test_kernels_agree_with_plain_torch_to_rounding():
    x, w, b = rows(37, 64, 10), rows(48, 64, 11), rows(1, 48, 12)[0]
    torch.testing.assert_close(batch_invariant.linear(x, w, b), F.linear(x, w, b))
    torch.testing.assert_close(batch_invariant.log_softmax(x), torch.log_softmax(x.double(), -1).float())
    torch.testing.assert_close(batch_invariant.softmax(x), torch.softmax(x.double(), -1).float())
    nw = rows(1, 64, 13)[0]
    xd = x.double()
    ref = nw.double() * xd / xd.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    torch.testing.assert_close(batch_invariant.rmsnorm(x, nw, 1e-6), ref.float())
    ref_offset = (1 + nw.double()) * xd / xd.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    torch.testing.assert_close(batch_invariant.rmsnorm(x, nw, 1e-6, offset=1.0), ref_offset.float())


def test_leading_dims_and_empty_input_keep_their_shape():
    x, w = rows(12, 32, 14).reshape(3, 4, 32), rows(8, 32, 15)
    assert batch_invariant.linear(x, w).shape == (3, 4, 8)
    assert batch_invariant.linear(x[:0], w).shape == (0, 4, 8)


@pytest.mark.parametrize("n,offset", SIZES_AND_OFFSETS)
def test_gated_activation_row_bit_identical_alone_and_in_any_batch(n, offset):
    gate, up = rows(1, 40, 16), rows(1, 40, 17)
    alone = batch_invariant.gated_activation(torch.cat([gate, up], dim=-1), F.silu)
    fused = torch.cat([embed(gate[0], n, offset, 18 + n), embed(up[0], n, offset, 19 + n)], dim=-1)
    inside = batch_invariant.gated_activation(fused, F.silu)[offset : offset + 1]
    assert torch.equal(alone, inside)
    torch.testing.assert_close(alone, F.silu(gate) * up)
