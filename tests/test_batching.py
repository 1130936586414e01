"""hinge.batching: the one ForwardBatch builder (device page table by rows, one staging copy)."""

from __future__ import annotations

import torch

from hinge.batching import ForwardBatchBuilder, StepSeq


def _builder() -> ForwardBatchBuilder:
    return ForwardBatchBuilder(page_size=4, max_rows=8, max_pages=6, device="cpu")


def test_a_mixed_step_matches_a_straightforward_recompute():
    b = _builder()
    decode = StepSeq(row=3, prefix_len=5, extend_len=1, pages=[3, 9], new_tokens=[6], sample=True)
    chunk = StepSeq(row=1, prefix_len=4, extend_len=5, pages=[5, 2, 7], new_tokens=[14, 15, 16, 17, 18],
                    logits_rows=[0, 2])
    fresh = StepSeq(row=2, prefix_len=0, extend_len=3, pages=[4], new_tokens=[30, 31, 32], sample=True,
                    state_slot=5)
    batch = b.build([decode, chunk, fresh])
    seqs = [decode, chunk, fresh]
    want_pos = [p for s in seqs for p in range(s.prefix_len, s.prefix_len + s.extend_len)]
    want_loc = [s.pages[p // 4] * 4 + p % 4 for s in seqs
                for p in range(s.prefix_len, s.prefix_len + s.extend_len)]
    assert batch.input_ids.tolist() == [6, 14, 15, 16, 17, 18, 30, 31, 32]
    assert batch.positions.tolist() == want_pos and batch.out_loc.tolist() == want_loc
    assert batch.page_table.tolist() == [[3, 9, 0], [5, 2, 7], [4, 0, 0]]
    assert batch.phase == "mixed" and batch.rows.tolist() == [3, 1, 2]
    assert batch.extend_lens.tolist() == [1, 5, 3] and batch.prefix_lens.tolist() == [5, 4, 0]
    assert batch.state_slots.tolist() == [0, 0, 5]
    # extra rows of every request first (chunk rows 0 and 2 -> 1, 3), then each sampling row
    assert batch.logits_indices.tolist() == [1, 3, 0, 8]


def test_page_table_rows_are_written_only_where_a_request_gained_pages():
    b = _builder()
    pages = [5, 2]
    b.build([StepSeq(row=1, prefix_len=0, extend_len=8, pages=pages, new_tokens=list(range(8)))])
    b.page_table[1, :2] = 99  # stands for "already on the device": a rewrite would restore 5, 2
    pages.append(7)
    batch = b.build([StepSeq(row=1, prefix_len=8, extend_len=1, pages=pages, new_tokens=[1])])
    assert batch.page_table.tolist() == [[99, 99, 7]], "only the new page was written"
    restarted = [6]  # a new list object: the row starts over (retraction, re-admission)
    batch = b.build([StepSeq(row=1, prefix_len=0, extend_len=2, pages=restarted, new_tokens=[1, 2])])
    assert batch.page_table.tolist() == [[6]] and b.page_table[1, :3].tolist() == [6, 99, 7]


def test_a_decode_without_host_token_reads_the_last_sampled_token_on_the_device():
    b = _builder()
    b.last_tokens[2] = 77
    batch = b.build([
        StepSeq(row=1, prefix_len=0, extend_len=2, pages=[1], new_tokens=[10, 11], sample=True),
        StepSeq(row=2, prefix_len=6, extend_len=1, pages=[2, 3], new_tokens=None, sample=True),
    ])
    assert batch.input_ids.tolist() == [10, 11, 77]


def test_batches_of_one_step_are_not_changed_by_building_the_next():
    """CPU steps own their tensors; the staging buffer is reused, the batch must not alias it."""
    b = _builder()
    first = b.build([StepSeq(row=1, prefix_len=0, extend_len=3, pages=[1], new_tokens=[1, 2, 3])])
    b.build([StepSeq(row=2, prefix_len=0, extend_len=3, pages=[2], new_tokens=[7, 8, 9])])
    b.build([StepSeq(row=3, prefix_len=0, extend_len=3, pages=[3], new_tokens=[4, 5, 6])])
    assert first.input_ids.tolist() == [1, 2, 3]


def test_runner_and_testing_kit_build_batches_with_the_same_builder(monkeypatch):
    from hinge.engine.request import Request, ScheduledBatch
    from hinge.engine.runner import ModelRunner
    from hinge.forward import KVCache
    from hinge.sampling_params import SamplingParams
    from hinge.testing.batches import build_batch
    from hinge.testing.paged_steps import PagedSteps

    calls = []
    original = ForwardBatchBuilder.build

    def spy(self, seqs, **kw):
        calls.append(len(seqs))
        return original(self, seqs, **kw)

    monkeypatch.setattr(ForwardBatchBuilder, "build", spy)
    build_batch([0, 3], [4, 1])
    req = Request("r", [1, 2, 3], SamplingParams())
    req.pages, req.row = [1], 1
    kv = KVCache(k=[torch.zeros(16, 1, 2)], v=[torch.zeros(16, 1, 2)], page_size=4)
    ModelRunner(None, None, kv, "cpu").prepare(ScheduledBatch("prefill", [req], [3]))
    model = type("M", (), {"attention_layers": [], "dtype": torch.float32})()
    PagedSteps(model, None, num_pages=4).batch([("a", [1, 2])])
    assert calls == [2, 1, 1]
