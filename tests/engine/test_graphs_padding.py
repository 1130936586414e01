"""Padding a live step to a captured shape (hinge.batching: static_batch, build(into=...),
pad_extend_lens) on CPU stand-ins for the static buffers: live rows equal an eager build, padded
rows are cleared on every step (invariant 4), including rows a previous, larger step filled."""

from __future__ import annotations

import torch

from hinge.batching import ForwardBatchBuilder, GraphShape, StepSeq, pad_extend_lens

PS = 4


def _builder(max_pages=6) -> ForwardBatchBuilder:
    return ForwardBatchBuilder(page_size=PS, max_rows=10, max_pages=max_pages, device="cpu")


def _decode(row, prefix, pages, token=None, slot=None):
    return StepSeq(row=row, prefix_len=prefix, extend_len=1, pages=pages,
                   new_tokens=None if token is None else [token], state_slot=slot, sample=True)


def _assert_padded_rows_cleared(batch, shape, live_rows, live_tokens):
    """Rows live_rows.. and tokens live_tokens.. hold the padding request, nothing else."""
    r, n = shape.num_requests, shape.num_tokens
    ext = pad_extend_lens(batch.extend_lens_cpu, n, r)
    assert batch.extend_lens.tolist() == ext
    assert batch.prefix_lens[live_rows:].tolist() == [0] * (r - live_rows)
    assert batch.rows[live_rows:].tolist() == [0] * (r - live_rows), "padded rows read table row 0"
    assert batch.state_slots[live_rows:].tolist() == [0] * (r - live_rows), "padded rows use state slot 0"
    assert batch.page_table[live_rows:].eq(0).all(), "a padded row's page-table row is all page 0"
    want_pos = [p for k in ext[live_rows:] for p in range(k)]
    assert batch.positions[live_tokens:].tolist() == want_pos
    assert batch.out_loc[live_tokens:].tolist() == [p % PS for p in want_pos], "padded KV goes to page 0"
    assert batch.input_ids[live_tokens:].eq(0).all()


def test_pad_extend_lens_spreads_padded_tokens_over_padded_rows():
    assert pad_extend_lens([1, 1, 1], 4, 4) == [1, 1, 1, 1], "decode: one token per padded row"
    assert pad_extend_lens([2, 2], 8, 4) == [2, 2, 2, 2], "verify shape: q tokens per padded row"
    assert pad_extend_lens([5, 3], 16, 5) == [5, 3, 3, 3, 2], "prefill: evenly, earlier rows first"
    assert pad_extend_lens([10, 6], 16, 4) == [10, 6, 0, 0], "a full step leaves zero-length rows"
    assert pad_extend_lens([], 6, 3) == [2, 2, 2], "the all-padding step a graph is captured with"


def test_the_static_batch_starts_as_all_padding_rows():
    shape = GraphShape.decode(4)
    static = _builder().static_batch(shape)
    batch = static.batch
    assert batch.extend_lens_cpu == [1, 1, 1, 1] and batch.prefix_lens_cpu == [0] * 4
    assert batch.phase == "decode" and batch.num_tokens == 4 and batch.page_table.shape == (4, 6)
    _assert_padded_rows_cleared(batch, shape, 0, 0)
    assert batch.logits_indices.tolist() == [0, 0, 0, 0]


def test_a_live_decode_of_three_in_a_shape_of_four_matches_an_eager_build():
    seqs = [_decode(3, 5, [3, 9], token=6, slot=2), _decode(1, 8, [5, 2, 7], token=11, slot=4),
            _decode(2, 1, [4], token=13, slot=1)]
    eager = _builder().build(seqs)
    b = _builder()
    static = b.static_batch(GraphShape.decode(4))
    live = b.build(seqs, into=static)
    assert live.extend_lens_cpu == [1, 1, 1] and live.prefix_lens_cpu == [5, 8, 1]
    assert live.input_ids is static.batch.input_ids, "the live step is a view of the static tensors"
    for name in ("input_ids", "positions", "out_loc", "extend_lens", "prefix_lens", "rows",
                 "state_slots", "logits_indices"):
        got, want = getattr(live, name), getattr(eager, name)
        assert got[:want.numel()].tolist() == want.tolist(), name
    w = eager.page_table.shape[1]
    assert live.page_table[:3, :w].tolist() == eager.page_table.tolist()
    _assert_padded_rows_cleared(live, static.shape, 3, 3)
    assert live.logits_indices[3:].tolist() == [0], "padded logit rows read token row 0"


def test_a_stale_row_of_a_previous_larger_step_never_survives():
    """Four live requests fill every row (pages, slots, positions); the next step has two: rows
    2 and 3 must be the padding request again, not what the four-request step left there."""
    b = _builder()
    shape = GraphShape.decode(4)
    static = b.static_batch(shape)
    big = [_decode(row, 10 + row, [row + 1, row + 5, row + 6, row + 7], token=40 + row, slot=row)
           for row in (1, 2, 3, 4)]
    full = b.build(big, into=static)
    assert full.page_table[3].ne(0).any() and full.state_slots[3] == 4 and full.prefix_lens[3] == 14
    small = b.build(big[:2], into=static)
    _assert_padded_rows_cleared(small, shape, 2, 2)
    assert small.input_ids[:2].tolist() == [41, 42]


def test_prefill_shape_pads_tokens_and_rows_and_gathers_whole_page_rows():
    b = _builder()
    shape = GraphShape.prefill(16, max_requests=4)
    static = b.static_batch(shape)
    seqs = [StepSeq(row=2, prefix_len=4, extend_len=6, pages=[7, 8, 9], new_tokens=list(range(6)),
                    sample=True),
            StepSeq(row=5, prefix_len=0, extend_len=3, pages=[3], new_tokens=[9, 9, 9])]
    live = b.build(seqs, into=static)
    assert live.phase == "prefill" and live.extend_lens_cpu == [6, 3]
    assert live.extend_lens.tolist() == [6, 3, 3, 2, 2], "7 padded tokens over 3 padded rows"
    assert live.positions[:9].tolist() == [4, 5, 6, 7, 8, 9, 0, 1, 2]
    assert live.logits_indices.tolist() == [5, 0, 0, 0], "one sampled row, then padding"
    assert live.page_table[:2].tolist() == [[7, 8, 9, 0, 0, 0], [3, 0, 0, 0, 0, 0]]
    _assert_padded_rows_cleared(live, shape, 2, 9)


def test_a_decode_token_still_on_the_device_is_read_into_the_static_input_ids():
    """Overlap scheduling: the previous step's sampled token is in builder.last_tokens."""
    b = _builder()
    static = b.static_batch(GraphShape.decode(2))
    b.last_tokens[3] = 77
    live = b.build([_decode(3, 5, [3, 9], token=None), _decode(1, 2, [5], token=8)], into=static)
    assert live.input_ids.tolist() == [77, 8]
    assert static.batch.input_ids.tolist() == [77, 8]


def test_shapes_sharing_one_page_table_each_see_their_own_rows():
    b = _builder()
    shared = torch.zeros(8, 6, dtype=torch.int64)
    big = b.static_batch(GraphShape.decode(8), page_table=shared)
    small = b.static_batch(GraphShape.decode(2), page_table=shared)
    b.build([_decode(row, 4, [row, row + 1]) for row in (1, 2, 3)], into=big)
    live = b.build([_decode(4, 4, [6, 5])], into=small)
    assert live.page_table.tolist() == [[6, 5, 0, 0, 0, 0], [0] * 6]
