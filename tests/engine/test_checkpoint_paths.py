"""Invariant 1 in the engine: the checkpoint-write counter moves on every path a step can take
(eager prefill, eager decode, decode graph, prefill graph), only checkpoints whose receipt came
back enter the prefix cache, and graph replays rewrite the checkpoint columns of padded rows
(invariant 4: slot 0, stamp 0) on every replay.

On CPU "replay" reruns the captured step over the static tensors (``RerunGraph``), so every
path's state write is the one the captured graph makes on the GPU (marked tests in
tests/hybrid/test_radix_gpu.py run them there)."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import add_graph_backend, decisions, engine, prompts, run

from hinge.batching import ForwardBatchBuilder, GraphShape, StepSeq
from hinge.engine.state_pool import StatePool
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

OPTIONS = dict(page_size=4, track_interval=8, max_running_requests=6, chunked_prefill_size=24)


@pytest.fixture(scope="module")
def qwen3_5(tmp_path_factory):
    path = make_tiny_checkpoint("qwen3_5", tmp_path_factory.mktemp("qwen3_5"), seed=5)
    write_byte_tokenizer(path)
    return path


def _writes(eng) -> dict[tuple[str, str], int]:
    return {(path, phase): n for path, phases in eng.checkpoint_writes.items() for phase, n in phases.items()}


def test_the_checkpoint_write_counter_moves_on_every_path(qwen3_5, monkeypatch):
    add_graph_backend(monkeypatch)
    eng = engine(qwen3_5, decisions(decode=(1, 2, 4), prefill=(16, 32), max_requests=4), **OPTIONS)
    # five decodes do not fit the largest decode graph (eager decode), fewer do (graph decode);
    # prompts of 16 and 24 tokens end a prefill step on the grid (a checkpoint a prefill graph
    # carries); the others put a checkpoint inside a step (eager prefill, the split run)
    lens = [16, 13, 24, 21, 9]
    params = [SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True) for n in (20, 9, 14, 30, 25)]
    run(eng, prompts(lens), params)
    writes, stats = _writes(eng), eng.stats()
    for path in [("eager", "prefill"), ("eager", "decode"), ("graph", "decode"), ("graph", "prefill")]:
        assert writes.get(path, 0) > 0, f"no checkpoint written on the {path} path: {writes}"
    assert stats.prefix_cache["checkpoints_unwritten"] == 0
    assert stats.graph_replays["decode"] > 0 and stats.graph_replays["prefill"] > 0
    # on CUDA the hybrid vetoes prefill graphs (host-built chunk layout): there this path is
    # reached only if the veto is lifted, and then this test's CUDA twin must see it move
    verdict = type(eng.model).graph_capture_eligibility("prefill")
    assert verdict is not None and not verdict.allow


def test_no_step_writes_a_state_the_tree_holds(qwen3_5, monkeypatch):
    """The tree's checkpoint slots are read (copied into a request's own slot), never written:
    graph replays of every size and eager steps leave each held state as it was inserted (the
    failure of a stale static row writing an earlier request's checkpoint)."""
    add_graph_backend(monkeypatch)
    eng = engine(qwen3_5, decisions(decode=(4,)), **OPTIONS)  # 1..4 live rows: one static shape
    snapshots: dict[int, list[torch.Tensor]] = {}
    real_insert = eng.cache.insert

    def state(slot):
        return [c[slot].clone() for c in eng.states.conv] + \
            [x[slot].clone() for x in eng.states.ssm if x is not None]

    def insert(tokens, pages, checkpoints=None, *, salt=None):
        back = real_insert(tokens, pages, checkpoints, salt=salt)
        held = {n.state for n in eng.cache.tree.nodes()}
        snapshots.update({s: state(s) for s in (checkpoints or {}).values() if s in held})
        return back

    eng.cache.insert = insert
    params = [SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True) for n in (9, 23, 16, 30)]
    first = run(eng, prompts([19, 26, 11, 30]), params)
    turn2 = [p + out[0] + [70] for p, out in zip(prompts([19, 26, 11, 30]), first, strict=True)]
    run(eng, turn2, params[::-1])
    held = [n.state for n in eng.cache.tree.nodes() if n.state is not None]
    assert held and eng.stats().prefix_cache["hit_tokens"] > 0
    for slot in held:
        for got, want in zip(state(slot), snapshots[slot], strict=True):
            assert torch.equal(got, want), f"checkpoint slot {slot} was written after its insert"


def test_a_checkpoint_nobody_wrote_never_enters_the_cache(qwen3_5):
    """Sabotage the receipt (the stamps of checkpoint slots are not written, as when a path skips
    the write): no state reaches the tree and a follow-up turn cannot hit; the same turn hits
    with the write intact."""
    params = SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True)
    prompt = prompts([29])[0]

    def two_turns(eng):
        first = run(eng, [prompt], params)[0]
        again = eng.add_request(prompt + first[0] + [65, 66], SamplingParams(max_new_tokens=1))
        while eng.has_unfinished():
            for out in eng.step():
                if out.rid == again and out.finished:
                    return out.cached_tokens
        raise AssertionError("the second turn never finished")

    good = engine(qwen3_5, attention="torch", **OPTIONS)
    assert two_turns(good) >= (29 + 12 - 1) // 8 * 8
    assert good.stats().prefix_cache["tree_checkpoints"] > 0

    bad = engine(qwen3_5, attention="torch", **OPTIONS)
    real_write = StatePool.write

    def write_without_receipt(self, state_id, slots, conv, ssm=None, stamps=None):
        if stamps is not None:
            stamps = torch.where(slots >= self.num_slots, torch.zeros_like(stamps), stamps)
        real_write(self, state_id, slots, conv, ssm, stamps)

    bad.states.write = write_without_receipt.__get__(bad.states)
    assert two_turns(bad) == 0, "a hit resumed from a checkpoint with no receipt"
    stats = bad.stats().prefix_cache
    assert stats["tree_checkpoints"] == 0 and stats["checkpoints_unwritten"] > 0
    assert bad.checkpoint_writes.get("eager", {}).get("prefill", 0) == 0


def test_padded_graph_rows_write_no_checkpoint_and_stamp_nothing():
    """A 4-row decode shape replayed with 4 live rows that end on checkpoints, then with 2: the
    static write-slot, checkpoint-slot and stamp columns of rows 2 and 3 are slot 0 and stamp 0
    again (nothing of the larger replay survives)."""
    builder = ForwardBatchBuilder(page_size=4, max_rows=8, max_pages=4, device="cpu")
    static = builder.static_batch(GraphShape.decode(4))

    def seqs(n):
        return [StepSeq(row=i + 1, prefix_len=3, extend_len=1, pages=[10 + i], new_tokens=[5],
                        state_slot=i + 1, state_write_slot=20 + i) for i in range(n)]

    batch = builder.build(seqs(4), into=static, stamp=7)
    assert batch.state_write_slots.tolist() == [20, 21, 22, 23]
    assert batch.state_stamps.tolist() == [7] * 4
    batch = builder.build(seqs(2), into=static, stamp=8)
    assert batch.state_slots.tolist() == [1, 2, 0, 0]
    assert batch.state_write_slots.tolist() == [20, 21, 0, 0]
    assert batch.checkpoint_slots.tolist() == [0, 0, 0, 0]
    assert batch.state_stamps.tolist() == [8, 8, 0, 0]


def test_decode_graph_replays_keep_every_checkpoint_an_eager_run_keeps(qwen3_5, monkeypatch):
    """Graph decode and eager decode end on the same checkpoints with the same states."""
    add_graph_backend(monkeypatch)
    params = SamplingParams(max_new_tokens=14, temperature=0, ignore_eos=True, logprobs=True)
    lens = [11, 5, 18]

    def tree_states(eng):
        out = {}
        for node in eng.cache.tree.nodes():
            if node.state is not None:
                key, n = [], node
                while n.parent is not None:
                    key, n = list(n.key) + key, n.parent
                out[tuple(key)] = [c[node.state].clone() for c in eng.states.conv] + \
                    [s[node.state].clone() for s in eng.states.ssm if s is not None]
        return out

    eager = engine(qwen3_5, **OPTIONS)
    want = run(eager, prompts(lens), params)
    graph = engine(qwen3_5, decisions(decode=(1, 2, 4)), **OPTIONS)
    got = run(graph, prompts(lens), params)
    assert [g[0] for g in got] == [w[0] for w in want]
    assert graph.stats().graph_replays["decode"] > 0 and ("graph", "decode") in _writes(graph)
    a, b = tree_states(eager), tree_states(graph)
    assert a.keys() == b.keys() and len(a) == 3
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            torch.testing.assert_close(x, y, atol=2e-4, rtol=1e-3)  # graph-test attention: not batch invariant
