"""ForwardBatch lengths and page tables -> flashinfer's paged layout, against a recompute."""

from __future__ import annotations

import random

import pytest
import torch

from hinge.builtin.flashinfer_graphs import GraphShape
from hinge.builtin.flashinfer_layout import (
    gather_page_indices,
    gather_page_indices_into,
    paged_layout,
)


def recompute(prefix_lens, extend_lens, page_table, page_size, num_live=None):
    """The layout written out request by request, the way flashinfer's docs define it."""
    num_live = len(prefix_lens) if num_live is None else num_live
    qo, kv, last, indices = [0], [0], [], []
    for i, (p, e) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        seq = p + e
        pages = (seq + page_size - 1) // page_size
        qo.append(qo[-1] + e)
        kv.append(kv[-1] + pages)
        last.append(seq - (pages - 1) * page_size if pages else 0)
        indices += page_table[i, :pages].tolist() if i < num_live else [0] * pages
    return qo, kv, last, indices


def random_case(rng: random.Random, page_size: int):
    b = rng.randint(1, 6)
    prefix = [rng.choice([0, rng.randint(0, 70)]) for _ in range(b)]
    extend = [rng.choice([1, rng.randint(1, 40)]) for _ in range(b)]
    width = max((p + e + page_size - 1) // page_size for p, e in zip(prefix, extend, strict=True)) + 2
    table = torch.randint(1, 1000, (b + 3, width + 5), generator=torch.Generator().manual_seed(rng.randint(0, 99)))
    return prefix, extend, table[1 : b + 2, 2 : width + 2]  # a strided view, as the builder's is


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_layout_and_page_indices_match_a_recompute_on_random_page_tables(page_size):
    rng = random.Random(page_size)
    for _ in range(25):
        prefix, extend, table = random_case(rng, page_size)
        assert not table.is_contiguous()
        layout = paged_layout(prefix, extend, page_size)
        qo, kv, last, indices = recompute(prefix, extend, table, page_size)
        assert (layout.qo_indptr, layout.kv_indptr, layout.last_page_len) == (qo, kv, last)
        got = gather_page_indices(table, layout)
        assert got.dtype == torch.int32 and got.tolist() == indices
        host = layout.host_tensors(pinned=False)
        assert [t.dtype for t in host] == [torch.int32] * 4
        seq_lens = [p + e for p, e in zip(prefix, extend, strict=True)]
        assert [t.tolist() for t in host] == [qo, kv, last, seq_lens]


def test_gather_into_static_buffers_equals_the_allocating_gather_and_zeroes_padding_pages():
    rng = random.Random(7)
    size = 400
    out = torch.full((size,), 99, dtype=torch.int32)
    index_buf = torch.zeros(size, dtype=torch.int64)
    value_buf = torch.zeros(size, dtype=torch.int64)
    for _ in range(20):
        prefix, extend, table = random_case(rng, 4)
        table = table.contiguous()  # a static page table
        num_live = rng.randint(0, len(prefix))
        layout = paged_layout(prefix, extend, 4, num_live=num_live)
        got = gather_page_indices_into(table, layout, out, index_buf, value_buf)
        assert got.data_ptr() == out.data_ptr(), "the result must be the static buffer itself"
        assert got.tolist() == gather_page_indices(table, layout).tolist()
        assert got.tolist() == recompute(prefix, extend, table, 4, num_live)[3]


def test_a_request_with_more_pages_than_the_page_table_row_is_an_error():
    layout = paged_layout([30], [3], 4)  # 9 pages
    with pytest.raises(ValueError, match="needs 9 pages but the page table holds 8 per row"):
        gather_page_indices(torch.zeros(1, 8, dtype=torch.int64), layout)


def test_padded_decode_shape_gives_each_padded_row_its_tokens_on_page_0():
    table = torch.tensor([[5, 6], [7, 8]])
    shape = GraphShape("decode", num_requests=4, num_tokens=12)  # verify: 3 rows per request
    layout = shape.padded([17, 4], [3, 3], page_size=16)
    assert layout.qo_indptr == [0, 3, 6, 9, 12]
    assert layout.kv_indptr == [0, 2, 3, 4, 5]
    assert layout.last_page_len == [4, 7, 3, 3]
    assert gather_page_indices(table, layout).tolist() == [5, 6, 7, 0, 0]


def test_padded_prefill_shape_spreads_leftover_tokens_and_leaves_empty_requests_pageless():
    table = torch.tensor([[3, 9], [4, 0]])
    shape = GraphShape("prefill", num_requests=5, num_tokens=40)
    layout = shape.padded([0, 4], [10, 4], page_size=8)
    # 26 padded tokens over 3 padded rows: 9, 9, 8 (hinge.batching.pad_extend_lens)
    assert layout.qo_indptr == [0, 10, 14, 23, 32, 40]
    assert layout.kv_indptr == [0, 2, 3, 5, 7, 8]
    assert layout.last_page_len == [2, 8, 1, 1, 8]
    assert gather_page_indices(table, layout).tolist() == [3, 9, 4, 0, 0, 0, 0, 0]
    empty = GraphShape("prefill", num_requests=4, num_tokens=6).padded([0], [5], page_size=8)
    assert empty.qo_indptr == [0, 5, 6, 6, 6] and empty.kv_indptr == [0, 1, 2, 2, 2]
    assert empty.last_page_len == [5, 1, 0, 0]
