"""The ``flashinfer`` backend's CUDA-graph bookkeeping on CPU, with the fake flashinfer module:
one set of wrappers per captured shape on shared static buffers, planned again before every
replay, and padded rows reset to page 0 (invariant 4).

The fake imitates a graph: a run recorded during "capture" is replayed by recomputing from the
wrapper's buffers in place, as a kernel replayed from a CUDA graph reads its tables by address.
Page 0 holds zeros and every page no live request holds NaN, so a padded row that reads anything
but page 0 shows as non-zero (or NaN) output.
"""

from __future__ import annotations

import torch
from fake_flashinfer import FakeFlashInfer

from hinge.builtin.flashinfer_attention import FlashInferAttentionBackend
from hinge.builtin.flashinfer_options import FlashInferOptions
from hinge.contracts import AttentionLayer
from hinge.forward import ForwardBatch, KVCache
from hinge.plugins.specs import BuildContext
from hinge.testing.reference import reference_attention

D, PS, PAGES, WIDTH = 64, 4, 64, 8
LAYER = AttentionLayer(kv_layer_id=0, num_heads=4, num_kv_heads=2, head_dim=D, scale=D**-0.5)


def ints(values) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64)


class Harness:
    """A backend over the fake, a NaN pool with page 0 zeroed, and captured shapes."""

    def __init__(self, max_batch_size=8, max_num_tokens=64):
        self.fake = FakeFlashInfer()
        build = BuildContext(device="cpu", dtype=torch.float32, deterministic=False, page_size=PS)
        self.attn = FlashInferAttentionBackend(FlashInferOptions(workspace_mb=16), build,
                                               flashinfer=self.fake)
        self.kv = KVCache([torch.full((PAGES * PS, 2, D), float("nan"))],
                          [torch.full((PAGES * PS, 2, D), float("nan"))], PS)
        self.kv.k[0][:PS] = 0
        self.kv.v[0][:PS] = 0
        self.attn.warmup([LAYER], self.kv)
        self.attn.init_graph_buffers(max_batch_size, max_num_tokens, WIDTH)
        self.graphs: dict = {}
        self.next_page = 1
        self.gen = torch.Generator().manual_seed(0)

    def capture(self, phase: str, num_requests: int, num_tokens: int) -> None:
        """An all-padding static batch of this shape (what the runner captures), then "capture"."""
        from hinge.batching import pad_extend_lens

        extend = pad_extend_lens([], num_tokens, num_requests)
        static = ForwardBatch(
            phase=phase, input_ids=ints([0] * num_tokens),
            positions=torch.cat([torch.arange(e) for e in extend]),
            extend_lens=ints(extend), prefix_lens=ints([0] * num_requests),
            page_table=torch.zeros(num_requests, WIDTH, dtype=torch.int64),
            out_loc=torch.cat([torch.arange(e) % PS for e in extend]),
            logits_indices=torch.arange(num_tokens), extend_lens_cpu=extend,
            prefix_lens_cpu=[0] * num_requests)
        self.attn.prepare_for_capture(static)
        q = torch.zeros(num_tokens, 4, D)
        kz = torch.zeros(num_tokens, 2, D)
        self.fake.recording = []
        out = self.attn.forward(q, kz, kz, LAYER, self.kv, static)
        self.graphs[(phase, num_requests, num_tokens)] = (static, q, out, self.fake.recording)
        self.fake.recording = None

    def replay(self, key, prefix_lens, extend_lens, phase=None):
        """Write a live step into the static batch (as the runner does), replay, and return the
        output and the oracle's answer for the live rows."""
        static, q_static, out, thunks = self.graphs[key]
        b, t = len(extend_lens), sum(extend_lens)
        pages, slots = [], []
        for p, e in zip(prefix_lens, extend_lens, strict=True):
            n = -(-(p + e) // PS)
            own = list(range(self.next_page, self.next_page + n))
            self.next_page += n
            pages.append(own + [0] * (WIDTH - n))
            slot = (ints(own)[:, None] * PS + torch.arange(PS)).reshape(-1)[: p + e]
            for cache in (self.kv.k[0], self.kv.v[0]):  # prefix and new keys (the graph writes those)
                cache[slot] = torch.randn(p + e, 2, D, generator=self.gen)
            slots.append(slot[p:])
        static.page_table.zero_()
        static.page_table[:b] = torch.tensor(pages)
        q_static.zero_()
        q_static[:t] = torch.randn(t, 4, D, generator=self.gen)
        live = ForwardBatch(  # the runner's static tensors with the live host lists
            phase=phase or key[0], input_ids=static.input_ids, positions=static.positions,
            extend_lens=static.extend_lens, prefix_lens=static.prefix_lens,
            page_table=static.page_table, out_loc=static.out_loc,
            logits_indices=static.logits_indices, extend_lens_cpu=list(extend_lens),
            prefix_lens_cpu=list(prefix_lens), attn_metadata=static.attn_metadata)
        self.attn.prepare_for_replay(live, key[1])
        for thunk in thunks:
            thunk()
        oracle_batch = ForwardBatch(
            phase=key[0], input_ids=ints([0] * t), positions=ints([0] * t),
            extend_lens=ints(extend_lens), prefix_lens=ints(prefix_lens),
            page_table=static.page_table[:b], out_loc=torch.cat(slots),
            logits_indices=ints([]), extend_lens_cpu=list(extend_lens),
            prefix_lens_cpu=list(prefix_lens))
        expected = reference_attention(q_static[:t], self.kv, LAYER, oracle_batch)
        return out, expected, t

    def forget_live_pages(self):
        """Every page handed out so far goes back to NaN (freed; a stale row reading it shows)."""
        for cache in (self.kv.k[0], self.kv.v[0]):
            cache[PS:] = float("nan")


def assert_replay(h: Harness, key, prefix_lens, extend_lens, phase=None):
    out, expected, t = h.replay(key, prefix_lens, extend_lens, phase)
    err = (out[:t].double() - expected).abs().max()
    assert err < 1e-5, f"live rows differ from the oracle by {err:.3g}"
    assert torch.equal(out[t:], torch.zeros_like(out[t:])), (
        "a padded row read something other than page 0 (a stale row of an earlier step?)")
    h.forget_live_pages()


def test_decode_graph_replays_equal_the_oracle_and_padded_rows_read_only_page_0():
    h = Harness()
    h.capture("decode", 4, 4)
    assert_replay(h, ("decode", 4, 4), [9, 3, 17, 0], [1, 1, 1, 1])
    assert_replay(h, ("decode", 4, 4), [5, 22, 1], [1, 1, 1])
    assert_replay(h, ("decode", 4, 4), [13], [1])  # rows 1..3 held live requests two steps ago
    assert_replay(h, ("decode", 4, 4), [2, 30], [1, 1])


def test_verify_graph_replays_equal_the_oracle():
    h = Harness()
    h.capture("verify", 3, 9)
    assert_replay(h, ("verify", 3, 9), [6, 11, 0], [3, 3, 3])
    assert_replay(h, ("verify", 3, 9), [20], [3])


def test_prefill_graph_replays_mixed_steps_and_leaves_padding_on_page_0():
    h = Harness()
    h.capture("prefill", 5, 24)
    assert_replay(h, ("prefill", 5, 24), [5, 0, 12, 3], [6, 9, 1, 8])
    assert_replay(h, ("prefill", 5, 24), [0], [2])  # 22 padded tokens over 4 padded requests
    assert_replay(h, ("prefill", 5, 24), [7, 0], [1, 23], phase="mixed")


def test_one_wrapper_set_per_captured_shape_on_shared_static_buffers_planned_before_each_replay():
    h = Harness()
    shapes = [("decode", 4, 4), ("decode", 2, 2), ("verify", 2, 6), ("prefill", 5, 16)]
    before = len(h.fake.wrappers)
    for key in shapes:
        h.capture(*key)
    graph_wrappers = h.fake.wrappers[before:]
    assert [(w.kind, w.fixed_batch_size) for w in graph_wrappers] == [
        ("decode", 4), ("decode", 2), ("prefill", 2), ("prefill", 5)]
    assert all(w.use_cuda_graph for w in graph_wrappers)
    assert len({w.bufs["indices"].data_ptr() for w in graph_wrappers}) == 1
    assert len({w.bufs["indptr"].data_ptr() for w in graph_wrappers}) == 1
    plans = len(h.fake.plans)
    assert_replay(h, ("decode", 2, 2), [3, 4], [1, 1])
    assert_replay(h, ("prefill", 5, 16), [0, 2], [7, 5])
    assert len(h.fake.wrappers) == before + 4, "a replay made a new wrapper"
    assert [w for w, _ in h.fake.plans[plans:]] == [graph_wrappers[1], graph_wrappers[3]]


def test_a_replay_found_by_phase_and_sizes_when_the_batch_does_not_carry_the_metadata():
    h = Harness()
    h.capture("decode", 4, 4)
    static = h.graphs[("decode", 4, 4)][0]
    meta = static.attn_metadata
    static.attn_metadata = None  # the runner built a fresh ForwardBatch over its static tensors
    out, expected, t = h.replay(("decode", 4, 4), [4, 8], [1, 1])
    assert (out[:t].double() - expected).abs().max() < 1e-5
    assert h.attn._captured[meta.graph] is meta


def test_a_decode_step_replayed_in_a_prefill_shaped_graph_plans_that_graphs_wrappers():
    """The runner may replay a uniform decode step in a prefill-shaped graph (no decode graph
    fits): the prefill shape's wrappers must be the ones planned, whatever the phase says."""
    h = Harness()
    h.capture("decode", 4, 4)
    h.capture("prefill", 5, 16)
    static = h.graphs[("prefill", 5, 16)][0]
    static.attn_metadata = None  # found by its sizes, not by the batch
    assert_replay(h, ("prefill", 5, 16), [3, 9, 14], [1, 1, 1], phase="decode")
