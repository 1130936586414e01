"""The merge of split attention, in torch and as the Triton kernel (under Triton's CPU
interpreter): float64 parts merged by log-sum-exp equal one attention over all keys; unused
slots are never read; a row's bits do not depend on the batch or on the slot count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fa4_helpers import attention_f64

import hinge_fa4
from hinge_fa4.combine import merge_parts_torch

KERNEL = Path(hinge_fa4.__file__).parent / "merge_triton.py"


@pytest.fixture(scope="module")
def triton_merge():
    """The kernel module imported with its kernel interpreted (a private copy)."""
    from hinge.testing.triton_interpreter import load_interpreted

    return load_interpreted(KERNEL, "_interpreted_hinge_fa4_merge_triton").merge_parts_triton


@pytest.fixture
def interpreter(monkeypatch):
    from hinge.testing.triton_interpreter import patch_interpreter

    patch_interpreter(monkeypatch)


def parts_f64(q, keys, vals, bounds, scale, softcap=None):
    """Attention of one query (sees every key) over each key range: (S, H, D), (S, H) float64."""
    outs, lses = [], []
    rep = q.shape[1] // keys.shape[1]
    for start, end in bounds:
        s = torch.einsum("hd,shd->hs", q[0].double(), keys[start:end].double().repeat_interleave(rep, 1))
        s = s * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[:, None])
        outs.append(torch.einsum("hs,shd->hd", p, vals[start:end].double().repeat_interleave(rep, 1)))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def three_rows(slots=6, garbage=float("nan")):
    """Rows of 4, 1 and 2 parts (the tail first, then chunks), unused slots full of garbage;
    returns the slot-major parts, the part counts and the float64 oracle per row."""
    gen = torch.Generator().manual_seed(1)
    outs, lses, wants = [], [], []
    for n_parts, seq in ((4, 100), (1, 7), (2, 40)):
        keys, vals = torch.randn(seq, 2, 8, generator=gen), torch.randn(seq, 2, 8, generator=gen)
        q = torch.randn(1, 4, 8, generator=gen)
        chunk = 32 if n_parts > 1 else seq
        bounds = [((n_parts - 1) * chunk, seq)] + [(c * chunk, (c + 1) * chunk) for c in range(n_parts - 1)]
        o, lse = parts_f64(q, keys, vals, bounds, 0.35)
        pad = slots - n_parts
        outs.append(torch.cat([o, torch.full((pad, 4, 8), garbage, dtype=torch.float64)]))
        lses.append(torch.cat([lse, torch.full((pad, 4), garbage, dtype=torch.float64)]))
        wants.append(attention_f64(q, keys, vals, [seq - 1], scale=0.35)[0])
    return torch.cat(outs), torch.cat(lses), torch.tensor([4, 1, 2], dtype=torch.int32), torch.stack(wants)


def test_merged_parts_equal_attention_over_all_keys_in_float64_in_torch():
    out, lse, parts, want = three_rows()
    got = merge_parts_torch(out, lse, parts, 6)
    assert got.dtype == torch.float64 and (got - want).abs().max() < 1e-12


@pytest.mark.usefixtures("interpreter")
def test_the_triton_merge_equals_attention_over_all_keys_in_float64_with_lse_in_any_layout(triton_merge):
    out, lse, parts, want = three_rows()
    got = triton_merge(out, lse, parts, 6, torch.float64)
    assert (got - want).abs().max() < 1e-12
    transposed = lse.t().contiguous().t()  # flash-attn's varlen lse is (H, V): a (V, H) view of it
    assert torch.equal(triton_merge(out, transposed, parts, 6, torch.float64), got)


@pytest.mark.usefixtures("interpreter")
def test_the_triton_merge_writes_bfloat16_within_one_rounding(triton_merge):
    out, lse, parts, want = three_rows()
    got = triton_merge(out.float(), lse.float(), parts, 6, torch.bfloat16)
    assert got.dtype == torch.bfloat16
    assert (got.double() - want).abs().max() <= 1.6e-2 * max(1.0, float(want.abs().max()))


@pytest.mark.usefixtures("interpreter")
def test_a_row_whose_parts_have_no_keys_merges_to_zeros(triton_merge):
    out = torch.full((2, 1, 4), float("nan"))
    lse = torch.full((2, 1), float("-inf"))
    for merged in (merge_parts_torch(out.clone(), lse, torch.tensor([2], dtype=torch.int32), 2),
                   triton_merge(out.clone(), lse, torch.tensor([2], dtype=torch.int32), 2, torch.float32)):
        assert torch.equal(merged, torch.zeros(1, 1, 4))


@pytest.mark.usefixtures("interpreter")
def test_the_triton_merge_of_more_parts_than_one_block_equals_attention_in_float64(triton_merge):
    """13 parts: two of the kernel's 8-part blocks, the second ragged."""
    gen = torch.Generator().manual_seed(5)
    keys, vals = torch.randn(13 * 16, 2, 8, generator=gen), torch.randn(13 * 16, 2, 8, generator=gen)
    q = torch.randn(1, 4, 8, generator=gen)
    bounds = [(c * 16, (c + 1) * 16) for c in range(13)]
    out, lse = parts_f64(q, keys, vals, bounds, 0.35)
    want = attention_f64(q, keys, vals, [13 * 16 - 1], scale=0.35)[0]
    got = triton_merge(out, lse, torch.tensor([13], dtype=torch.int32), 13, torch.float64)
    assert (got[0] - want).abs().max() < 1e-12


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("n", [5, 13])
def test_a_rows_bits_do_not_depend_on_the_batch_or_the_slot_count(triton_merge, n):
    """float32: the same ``n`` parts merged alone in ``n`` slots, and in 16 or 64 slots beside
    other rows (garbage in the unused slots); 13 parts span two of the kernel's blocks."""
    gen = torch.Generator().manual_seed(3)
    outs = torch.randn(n, 4, 16, generator=gen)
    lses = torch.randn(n, 4, generator=gen) * 3
    alone_parts = torch.tensor([n], dtype=torch.int32)
    alone = {"torch": merge_parts_torch(outs, lses, alone_parts, n),
             "triton": triton_merge(outs, lses, alone_parts, n, torch.float32)}
    for slots, rows in ((16, 3), (64, 2)):
        big_o = torch.randn(rows * slots, 4, 16, generator=gen)
        big_l = torch.randn(rows * slots, 4, generator=gen)
        big_o[slots:slots + n], big_l[slots:slots + n] = outs, lses
        big_o[slots + n:2 * slots], big_l[slots + n:2 * slots] = float("nan"), float("nan")
        parts = torch.randint(1, slots + 1, (rows,), generator=gen, dtype=torch.int32)
        parts[1] = n
        got = {"torch": merge_parts_torch(big_o, big_l, parts, slots),
               "triton": triton_merge(big_o, big_l, parts, slots, torch.float32)}
        for name in alone:
            assert torch.equal(got[name][1], alone[name][0]), f"{name}: bits changed with {slots} slots"
