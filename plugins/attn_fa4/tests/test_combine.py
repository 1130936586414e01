"""The merge of split attention: float64 parts merged by log-sum-exp equal one attention over
all keys; the fixed order makes a row's bits independent of how many parts other rows have."""

from __future__ import annotations

import torch
from fa4_helpers import attention_f64

from hinge_fa4.combine import merge_partials, tree_sum


def parts_f64(q, keys, vals, position, bounds, scale, softcap=None):
    """Attention of one query over each key range in ``bounds``: (out, lse) per part, float64."""
    outs, lses = [], []
    rep = q.shape[1] // keys.shape[1]
    for start, end in bounds:
        k = keys[start:end].double().repeat_interleave(rep, 1)
        s = torch.einsum("hd,shd->hs", q[0].double(), k) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(torch.arange(start, end)[None, :] > position, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[:, None])
        outs.append(torch.einsum("hs,shd->hd", p, vals[start:end].double().repeat_interleave(rep, 1)))
        lses.append(lse)
    return torch.stack(outs)[None], torch.stack(lses)[None]  # (1, S, H, D), (1, S, H)


def test_merged_parts_equal_attention_over_all_keys_in_float64():
    gen = torch.Generator().manual_seed(1)
    keys, vals = torch.randn(100, 2, 8, generator=gen), torch.randn(100, 2, 8, generator=gen)
    q = torch.randn(1, 4, 8, generator=gen)
    for softcap in (None, 1.5):
        # the tail first, then chunks in order: the layout hinge_fa4.split produces
        out, lse = merge_partials(*parts_f64(q, keys, vals, 99, [(96, 100), (0, 32), (32, 64), (64, 96)],
                                             0.35, softcap))
        want = attention_f64(q, keys, vals, [99], scale=0.35, softcap=softcap)
        assert out.dtype == torch.float64 and (out - want).abs().max() < 1e-12
        k = keys.double().repeat_interleave(2, 1)
        s = torch.einsum("hd,shd->hs", q[0].double(), k) * 0.35
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        assert (lse[0] - torch.logsumexp(s, -1)).abs().max() < 1e-12


def test_empty_parts_weigh_nothing_even_when_their_outputs_are_garbage():
    gen = torch.Generator().manual_seed(2)
    out_parts = torch.randn(3, 4, 2, 8, generator=gen, dtype=torch.float64)
    lse_parts = torch.randn(3, 4, 2, generator=gen, dtype=torch.float64)
    want, want_lse = merge_partials(out_parts[:, :2], lse_parts[:, :2])
    out_parts[:, 2:] = float("nan")
    lse_parts[:, 2:] = float("-inf")
    got, got_lse = merge_partials(out_parts, lse_parts)
    assert torch.allclose(got, want, atol=1e-14) and torch.allclose(got_lse, want_lse, atol=1e-14)


def test_a_row_with_no_keys_merges_to_zeros_and_minus_infinity():
    out, lse = merge_partials(torch.full((1, 2, 1, 4), float("nan")), torch.full((1, 2, 1), float("-inf")))
    assert torch.equal(out, torch.zeros(1, 1, 4)) and lse.item() == float("-inf")


def test_a_rows_bits_do_not_depend_on_the_part_count_of_the_batch():
    """float32: the same 5 parts merged alone, padded to 8 and to 64 slots, beside other rows."""
    gen = torch.Generator().manual_seed(3)
    outs = torch.randn(1, 5, 4, 16, generator=gen)
    lses = torch.randn(1, 5, 4, generator=gen) * 3
    alone, alone_lse = merge_partials(outs, lses)
    for slots, rows in ((8, 3), (64, 7), (6, 1)):
        big_o = torch.randn(rows, slots, 4, 16, generator=gen)
        big_l = torch.randn(rows, slots, 4, generator=gen)
        big_o[1 % rows, :5], big_l[1 % rows, :5] = outs[0], lses[0]
        big_l[1 % rows, 5:] = float("-inf")
        got, got_lse = merge_partials(big_o, big_l)
        assert torch.equal(got[1 % rows], alone[0]), f"bits changed with {slots} part slots"
        assert torch.equal(got_lse[1 % rows], alone_lse[0])


def test_the_tree_sum_associates_by_index_alone():
    x = torch.tensor([[1e8, 1.0, -1e8, 1.0, 3.0]], dtype=torch.float32)
    # ((x0 + x4) + (x2 + 0)) + ((x1 + 0) + (x3 + 0)) in float32
    want = ((x[0, 0] + x[0, 4]) + x[0, 2]) + (x[0, 1] + x[0, 3])
    assert tree_sum(x, dim=1)[0] == want
    assert tree_sum(torch.tensor([[7.0]]), dim=1).item() == 7.0
