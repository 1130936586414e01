"""ModelRunner.prepare: flat tokens, positions, KV slots, page table and logits rows."""

from __future__ import annotations

import torch

from hinge.engine.request import Request, ScheduledBatch
from hinge.engine.runner import ModelRunner
from hinge.forward import KVCache
from hinge.sampling_params import SamplingParams


def _kv(page_size=4) -> KVCache:
    k = [torch.zeros(16 * page_size, 1, 2)]
    return KVCache(k=k, v=[torch.zeros_like(k[0])], page_size=page_size)


_rows = iter(range(1, 1000))


def _req(rid, prompt, output=(), computed=0, pages=(), **params) -> Request:
    req = Request(rid, list(prompt), SamplingParams(**params))
    req.output_ids, req.num_computed, req.pages = list(output), computed, list(pages)
    req.row = next(_rows) % 60 + 1
    return req


def test_prepare_flattens_a_mixed_batch():
    decode = _req("d", [1, 2, 3, 4, 5], output=[6], computed=5, pages=[3, 9])
    chunk = _req("c", list(range(10, 20)), computed=4, pages=[5, 2, 7])  # runs 4..8, keeps 9
    last = _req("l", [30, 31, 32], pages=[4])
    runner = ModelRunner(None, None, _kv(), "cpu")
    batch, sample, prompt_rows = runner.prepare(ScheduledBatch("mixed", [decode, chunk, last],
                                                               [1, 5, 3]))
    assert batch.input_ids.tolist() == [6, 14, 15, 16, 17, 18, 30, 31, 32]
    assert batch.positions.tolist() == [5, 4, 5, 6, 7, 8, 0, 1, 2]
    # slot = page * 4 + offset: decode pos 5 -> page 9; chunk 4..8 -> pages 2, 2, 2, 2, 7
    assert batch.out_loc.tolist() == [37, 8, 9, 10, 11, 28, 16, 17, 18]
    assert batch.page_table.tolist() == [[3, 9, 0], [5, 2, 7], [4, 0, 0]]
    assert batch.prefix_lens_cpu == [5, 4, 0] and batch.extend_lens_cpu == [1, 5, 3]
    assert sample == [decode, last] and prompt_rows == []
    assert batch.logits_indices.tolist() == [0, 8], "last row of each request that samples"


def test_prompt_logprob_rows_come_first_and_cover_the_chunk():
    req = _req("p", list(range(40, 50)), computed=3, pages=[1, 2, 3], prompt_logprobs_start=2)
    req.prompt_logprobs = [-1.0]  # position 2 was done in an earlier chunk
    runner = ModelRunner(None, None, _kv(), "cpu")
    batch, sample, prompt_rows = runner.prepare(ScheduledBatch("prefill", [req], [7]))
    # rows 0..6 are positions 3..9; position p's logprob is read from row of position p - 1
    ((r, rows, targets),) = prompt_rows
    assert r is req and rows == [0, 1, 2, 3, 4, 5]
    assert targets == [44, 45, 46, 47, 48, 49]  # prompt positions 4..9
    assert batch.logits_indices.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert sample == [req]
