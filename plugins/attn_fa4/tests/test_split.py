"""The split planner: fixed-size chunks at absolute positions plus a causal tail, laid out on
the device from seq_lens and the page table, checked against a plain enumeration."""

from __future__ import annotations

import pytest
import torch

from hinge_fa4.split import chunk_queries, full_chunks, max_chunks, split_tensors


def enumerate_parts(seq: int, q: int, size: int, cap: int) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """A request's chunks and tail, written out: chunk c covers [c size, (c+1) size) while every
    query sees all of it, at most ``cap`` chunks; the tail is the rest."""
    chunks = []
    while len(chunks) < cap and (len(chunks) + 1) * size <= seq - q:
        chunks.append((len(chunks) * size, (len(chunks) + 1) * size))
    return chunks, (len(chunks) * size, seq)


CASES = [  # (seq_lens, q_len, split_size, max_splits)
    ([1, 16, 17, 40, 100], 1, 16, 8),
    ([5, 33, 64, 65, 300], 4, 16, 3),  # verify shape; chunk cap reached: long tails
    ([128, 129, 1000], 1, 128, 64),
]


@pytest.mark.parametrize("seq_lens, q, size, cap", CASES)
def test_the_layout_matches_the_enumeration(seq_lens, q, size, cap):
    page = 16 if size % 16 == 0 else size
    width = max(-(-s // page) for s in seq_lens) + 2
    gen = torch.Generator().manual_seed(0)
    table = torch.randint(1, 500, (len(seq_lens), width), generator=gen)
    seqs = torch.tensor(seq_lens)
    n = int(full_chunks(seqs, q, size, cap).max())
    s = split_tensors(seqs, table, q_len=q, page_size=page, split_size=size, max_splits=cap, num_chunks=n)
    per = size // page
    for i, seq in enumerate(seq_lens):
        chunks, (tail_start, tail_end) = enumerate_parts(seq, q, size, cap)
        used = s.chunk_used.view(len(seq_lens), n)[i].tolist() if n else []
        assert used == [size] * len(chunks) + [0] * (n - len(chunks))
        for c, (start, _) in enumerate(chunks):
            row = s.chunk_pages[i * n + c].tolist()
            assert row == table[i, start // page: start // page + per].tolist(), f"chunk {c} pages"
        assert int(s.tail_used[i]) == tail_end - tail_start
        need = -(-(tail_end - tail_start) // page)
        assert s.tail_pages[i, :need].tolist() == table[i, tail_start // page: tail_start // page + need].tolist()
        assert tail_end - tail_start >= q, "the tail holds every query position"
    for t in (s.chunk_pages, s.chunk_used, s.chunk_cu_q, s.tail_pages, s.tail_used, s.tail_cu_q):
        assert t.dtype == torch.int32 and t.is_contiguous(), "flash-attn asserts int32, contiguous"
    assert s.tail_cu_q.tolist() == [q * i for i in range(len(seq_lens) + 1)]


def test_a_requests_parts_cover_its_keys_once_and_start_at_page_boundaries():
    for seq in range(1, 200):
        for q in (1, 3):
            if q > seq:
                continue
            chunks, tail = enumerate_parts(seq, q, 32, 4)
            n = int(full_chunks(torch.tensor([seq]), q, 32, 4))
            assert n == len(chunks)
            bounds = [b for c in chunks for b in c] + list(tail)
            assert bounds[0] == 0 and bounds[-1] == seq
            assert all(bounds[k] == bounds[k + 1] for k in range(1, len(bounds) - 1, 2)), "contiguous"
            assert tail[0] % 32 == 0


def test_a_requests_layout_does_not_depend_on_the_batch():
    """The same request alone, or beside longer ones (more chunk slots), gets the same parts."""
    table = torch.arange(1, 41).view(1, 40).repeat(3, 1)
    alone = split_tensors(torch.tensor([70]), table[:1], q_len=1, page_size=16, split_size=16,
                          max_splits=8, num_chunks=4)
    batched = split_tensors(torch.tensor([300, 70, 5]), table, q_len=1, page_size=16, split_size=16,
                            max_splits=8, num_chunks=8)
    assert batched.chunk_used.view(3, 8)[1, :4].tolist() == alone.chunk_used.tolist()
    assert batched.chunk_used.view(3, 8)[1, 4:].tolist() == [0] * 4
    assert batched.tail_used[1] == alone.tail_used[0]


def test_graph_buffers_are_filled_in_place():
    table = torch.randint(1, 90, (2, 12))
    fresh = split_tensors(torch.tensor([100, 40]), table, q_len=2, page_size=16, split_size=32,
                          max_splits=3, num_chunks=3)
    static = split_tensors(torch.tensor([2, 2]), torch.zeros_like(table), q_len=2, page_size=16,
                           split_size=32, max_splits=3, num_chunks=3)
    ptrs = [t.data_ptr() for t in (static.chunk_pages, static.chunk_used, static.tail_pages, static.tail_used)]
    split_tensors(torch.tensor([100, 40]), table, q_len=2, page_size=16, split_size=32, max_splits=3,
                  num_chunks=3, out=static)
    assert ptrs == [t.data_ptr() for t in (static.chunk_pages, static.chunk_used, static.tail_pages, static.tail_used)]
    for a, b in ((fresh.chunk_pages, static.chunk_pages), (fresh.chunk_used, static.chunk_used),
                 (fresh.tail_pages, static.tail_pages), (fresh.tail_used, static.tail_used)):
        assert torch.equal(a, b)


def test_chunk_slots_never_exceed_the_page_table():
    assert max_chunks(max_pages=10, page_size=16, split_size=32, max_splits=64) == 4  # 159 // 32
    assert max_chunks(max_pages=10, page_size=16, split_size=32, max_splits=2) == 2
    with pytest.raises(AssertionError, match="do not fit a page table"):
        split_tensors(torch.tensor([50]), torch.zeros(1, 3, dtype=torch.int64), q_len=1, page_size=16,
                      split_size=32, max_splits=8, num_chunks=2)


def test_queries_repeat_once_per_chunk_slot_in_request_chunk_query_order():
    table = torch.zeros(2, 8, dtype=torch.int64)
    s = split_tensors(torch.tensor([40, 40]), table, q_len=2, page_size=16, split_size=16,
                      max_splits=3, num_chunks=2)
    q = torch.arange(4.0).view(4, 1, 1)  # rows: request 0 (0, 1), request 1 (2, 3)
    assert chunk_queries(q, s).flatten().tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
