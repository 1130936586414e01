"""The torch restatement of flash_attn_varlen_func over paged KV (what the CPU tests run the
backend through) against a plain float64 attention: bottom-right causal alignment, left windows,
softcap, lse, empty requests, and the argument rules flash-attn asserts."""

from __future__ import annotations

import pytest
import torch
from fa4_helpers import attention_f64

from hinge.testing.batches import PAGE_TAIL_FILL
from hinge_fa4.reference_kernel import ReferenceKernel

PAGE = 4


def paged(requests, heads=4, kv_heads=2, dim=8, seed=0):
    """Random keys per request stored in shuffled pages; returns the call's tensors and the data."""
    gen = torch.Generator().manual_seed(seed)
    num_pages = 1 + sum(-(-sk // PAGE) for sk, _ in requests) + 2
    order = (torch.randperm(num_pages - 1, generator=gen) + 1).tolist()
    k_pages = torch.full((num_pages, PAGE, kv_heads, dim), float("nan"), dtype=torch.float64)
    v_pages = k_pages.clone()
    width = max(-(-sk // PAGE) for sk, _ in requests) + 1
    table = torch.zeros(len(requests), width, dtype=torch.int32)
    data, qs, cu = [], [], [0]
    for b, (sk, sq) in enumerate(requests):
        keys, vals = torch.randn(sk, kv_heads, dim, generator=gen, dtype=torch.float64), \
            torch.randn(sk, kv_heads, dim, generator=gen, dtype=torch.float64)
        pages = [order.pop() for _ in range(-(-sk // PAGE))]
        table[b, :len(pages)] = torch.tensor(pages, dtype=torch.int32)
        for j in range(sk):
            k_pages[pages[j // PAGE], j % PAGE], v_pages[pages[j // PAGE], j % PAGE] = keys[j], vals[j]
        # the last page's tail is read and masked, as on the GPU: finite there (reads_page_tails)
        k_pages[pages[-1], sk - (len(pages) - 1) * PAGE:] = PAGE_TAIL_FILL
        v_pages[pages[-1], sk - (len(pages) - 1) * PAGE:] = PAGE_TAIL_FILL
        q = torch.randn(sq, heads, dim, generator=gen, dtype=torch.float64)
        data.append((keys, vals, q))
        qs.append(q)
        cu.append(cu[-1] + sq)
    args = dict(cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
                seqused_k=torch.tensor([sk for sk, _ in requests], dtype=torch.int32),
                page_table=table, max_seqlen_q=max(sq for _, sq in requests))
    return torch.cat(qs), k_pages, v_pages, args, data


@pytest.mark.parametrize("causal, window, softcap", [
    (True, None, None), (False, None, None), (True, 3, None), (True, None, 2.0), (False, None, 2.0)])
def test_the_emulation_matches_plain_float64_attention(causal, window, softcap):
    requests = [(9, 9), (13, 2), (5, 1), (20, 20)]  # (keys, queries): prefill, extend, decode
    q, kp, vp, args, data = paged(requests)
    out, lse = ReferenceKernel().varlen(q, kp, vp, softmax_scale=0.3, causal=causal,
                                        window_left=window, softcap=softcap, return_lse=True, **args)
    row = 0
    for (sk, sq), (keys, vals, qr) in zip(requests, data, strict=True):
        positions = list(range(sk - sq, sk))  # bottom-right aligned
        want = attention_f64(qr, keys, vals, positions, scale=0.3, causal=causal or window is not None,
                             window=None if window is None else window + 1, softcap=softcap)
        assert (out[row:row + sq] - want).abs().max() < 1e-12
        row += sq
    assert lse.shape == (4, q.shape[0]) and lse.dtype == torch.float64 and torch.isfinite(lse).all()


def test_queries_that_see_no_key_give_zeros_and_minus_infinity():
    q, kp, vp, args, _ = paged([(3, 5), (4, 1)])  # causal, more queries than keys: 2 see nothing
    args["seqused_k"][1] = 0  # a request with no keys at all
    out, lse = ReferenceKernel().varlen(q, kp, vp, softmax_scale=1.0, causal=True, return_lse=True, **args)
    assert torch.equal(out[:2], torch.zeros_like(out[:2])) and torch.isinf(lse[:, :2]).all()
    assert torch.isfinite(out[2:5]).all()
    assert torch.equal(out[5], torch.zeros_like(out[5])) and (lse[:, 5] == float("-inf")).all()


def test_the_argument_rules_flash_attn_asserts_are_asserted():
    q, kp, vp, args, _ = paged([(5, 1)])
    kernel = ReferenceKernel()
    with pytest.raises(AssertionError, match="page_table must be int32"):
        kernel.varlen(q, kp, vp, softmax_scale=1.0, causal=True, **{**args, "page_table": args["page_table"].long()})
    with pytest.raises(AssertionError, match="seqused_k must be int32"):
        kernel.varlen(q, kp, vp, softmax_scale=1.0, causal=True, **{**args, "seqused_k": args["seqused_k"].long()})
    with pytest.raises(AssertionError, match="max_seqlen_q"):
        kernel.varlen(q, kp, vp, softmax_scale=1.0, causal=True, **{**args, "max_seqlen_q": 0})
