"""The split planner: per query, fixed-size chunks at absolute positions plus a tail, one slot
per part, laid out on the device from seq_lens and the page table, checked against a plain
enumeration."""

from __future__ import annotations

import pytest
import torch

from hinge_fa4.split import expand_queries, max_chunks, part_width, split_tensors


def enumerate_parts(position: int, size: int, cap: int, long_tail: bool = False) -> list[tuple[int, int]]:
    """A query's parts, written out: its tail first, then chunk c = [c size, (c+1) size) while
    the query sees all of it (with ``long_tail``: all of it and a whole chunk more; at most
    ``cap``); the tail is the rest up to the query's key."""
    chunks = []
    keep = size if long_tail else 1  # keys the tail keeps past the chunks, at least
    while len(chunks) < cap and (len(chunks) + 1) * size + keep <= position + 1:
        chunks.append((len(chunks) * size, (len(chunks) + 1) * size))
    return [(len(chunks) * size, position + 1), *chunks]


CASES = [  # (seq_lens, q_len, split_size, max_splits)
    ([1, 16, 17, 40, 100], 1, 16, 8),
    ([5, 33, 64, 65, 300], 4, 16, 3),  # verify shape; chunk cap reached: long tails
    ([128, 129, 1000], 1, 128, 64),
]


@pytest.mark.parametrize("long_tail", [False, True], ids=["short-tail", "long-tail"])
@pytest.mark.parametrize("seq_lens, q, size, cap", CASES)
def test_the_layout_matches_the_enumeration(seq_lens, q, size, cap, long_tail):
    page = 16
    max_pages = max(-(-s // page) for s in seq_lens) + 2
    gen = torch.Generator().manual_seed(0)
    table = torch.randint(1, 500, (len(seq_lens), max_pages), generator=gen)
    slots = 1 + max(len(enumerate_parts(s - 1, size, cap, long_tail)) - 1 for s in seq_lens)
    s = split_tensors(torch.tensor(seq_lens), table, q_len=q, page_size=page, split_size=size,
                      max_splits=cap, num_slots=slots, long_tail=long_tail)
    used, pages = s.seqused_k.view(-1, slots), s.page_table.view(-1, slots, s.page_table.shape[1])
    for i, seq in enumerate(seq_lens):
        for j in range(q):
            t = i * q + j
            parts = enumerate_parts(seq - q + j, size, cap, long_tail)
            assert int(s.num_parts[t]) == len(parts)
            assert used[t].tolist() == [end - start for start, end in parts] + [0] * (slots - len(parts))
            for slot, (start, end) in enumerate(parts):
                need = -(-(end - start) // page)
                assert start % page == 0 and need <= s.page_table.shape[1], "a part's pages fit its row"
                assert pages[t, slot, :need].tolist() == table[i, start // page: start // page + need].tolist()
    for t in (s.page_table, s.seqused_k, s.num_parts):
        assert t.dtype == torch.int32 and t.is_contiguous(), "flash-attn asserts int32, contiguous"


@pytest.mark.parametrize("long_tail", [False, True], ids=["short-tail", "long-tail"])
def test_a_querys_parts_cover_its_keys_once_and_its_tail_is_as_its_rule_says(long_tail):
    for position in range(0, 300):
        parts = enumerate_parts(position, 32, 4, long_tail)
        (tail_start, tail_end), chunks = parts[0], parts[1:]
        bounds = [b for c in chunks for b in c] + [tail_start, tail_end]
        assert bounds[0] == 0 and bounds[-1] == position + 1
        assert all(bounds[k] == bounds[k + 1] for k in range(1, len(bounds) - 1, 2)), "contiguous"
        tail = tail_end - tail_start
        assert tail >= 1 and (len(chunks) == 4 or tail < (64 if long_tail else 33)), "below the cap"
        if long_tail:
            assert position + 1 < 32 or tail >= 32, "a long tail is never a sliver once a chunk is seen"


@pytest.mark.parametrize("long_tail", [False, True], ids=["short-tail", "long-tail"])
def test_the_backends_host_count_and_the_device_layout_agree_on_the_chunks(long_tail):
    from hinge_fa4.split import full_chunks

    positions = torch.arange(-1, 400)
    on_device = full_chunks(positions, 32, 5, long_tail)
    assert on_device.tolist() == [full_chunks(int(p), 32, 5, long_tail) for p in positions]
    assert on_device.tolist()[1:] == [len(enumerate_parts(int(p), 32, 5, long_tail)) - 1
                                      for p in positions[1:]]
    # 4097 keys: 16 chunks and a one-key tail, or 15 chunks and a 257-key tail
    assert full_chunks(4096, 256, 64, long_tail) == (15 if long_tail else 16)


def test_a_requests_layout_does_not_depend_on_the_batch():
    """The same request alone, or beside longer ones (more slots), gets the same parts."""
    table = torch.arange(1, 41).view(1, 40).repeat(3, 1)
    alone = split_tensors(torch.tensor([70]), table[:1], q_len=1, page_size=16, split_size=16,
                          max_splits=8, num_slots=5)
    batched = split_tensors(torch.tensor([300, 70, 5]), table, q_len=1, page_size=16, split_size=16,
                            max_splits=8, num_slots=9)
    assert batched.seqused_k.view(3, 9)[1, :5].tolist() == alone.seqused_k.tolist()
    assert batched.seqused_k.view(3, 9)[1, 5:].tolist() == [0] * 4
    assert batched.page_table.view(3, 9, -1)[1, :5].tolist() == alone.page_table.tolist()
    assert batched.num_parts[1] == alone.num_parts[0]


def test_padded_rows_of_a_verify_graph_get_an_empty_or_short_tail_on_their_own_pages():
    """Rows of fewer keys than queries (padding) never look at a negative position's pages."""
    s = split_tensors(torch.tensor([2, 0]), torch.zeros(2, 4, dtype=torch.int64), q_len=3, page_size=16,
                      split_size=16, max_splits=2, num_slots=2)
    assert s.seqused_k.view(6, 2)[:, 0].tolist() == [0, 1, 2, 0, 0, 0]
    assert s.num_parts.tolist() == [1] * 6


def test_graph_buffers_are_filled_in_place():
    table = torch.randint(1, 90, (2, 12))
    args = dict(q_len=2, page_size=16, split_size=32, max_splits=3, num_slots=4)
    fresh = split_tensors(torch.tensor([100, 40]), table, **args)
    static = split_tensors(torch.tensor([2, 2]), torch.zeros_like(table), **args)
    ptrs = [t.data_ptr() for t in (static.page_table, static.seqused_k, static.num_parts)]
    split_tensors(torch.tensor([100, 40]), table, out=static, **args)
    assert ptrs == [t.data_ptr() for t in (static.page_table, static.seqused_k, static.num_parts)]
    for a, b in ((fresh.page_table, static.page_table), (fresh.seqused_k, static.seqused_k),
                 (fresh.num_parts, static.num_parts)):
        assert torch.equal(a, b)


def test_slots_and_part_widths_never_exceed_the_page_table():
    assert max_chunks(max_pages=10, page_size=16, split_size=32, max_splits=64) == 4  # 159 // 32
    assert max_chunks(max_pages=10, page_size=16, split_size=32, max_splits=64, long_tail=True) == 4
    assert max_chunks(max_pages=10, page_size=16, split_size=32, max_splits=2) == 2
    assert part_width(max_pages=10, page_size=16, split_size=32, max_splits=64) == 2, "a chunk's pages"
    assert part_width(max_pages=10, page_size=16, split_size=32, max_splits=64, long_tail=True) == 4, \
        "a long tail's"
    assert part_width(max_pages=10, page_size=16, split_size=32, max_splits=2) == 6, "a capped tail's"
    assert part_width(max_pages=1, page_size=16, split_size=32, max_splits=2) == 1


def test_queries_repeat_once_per_slot_in_row_slot_order_as_one_contiguous_copy():
    q = torch.arange(3.0).view(3, 1, 1)
    rows = expand_queries(q, 2)
    assert rows.flatten().tolist() == [0, 0, 1, 1, 2, 2]
    one = expand_queries(q[:1], 4)
    assert one.is_contiguous() and one.stride(0) == 1, "no stride-0 view for a single row"
