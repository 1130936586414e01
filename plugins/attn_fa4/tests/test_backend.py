"""The fa4 backend's own decisions on CPU (the torch emulation of the kernel): when decode steps
split, that a split decode equals one attention over all keys in float64, that a request's bits
do not depend on its batch when every decode splits, what warm-up compiles, and its errors."""

from __future__ import annotations

import pytest
import torch

from hinge.contracts import AttentionLayer
from hinge.plugins import BuildContext
from hinge.testing.batches import PAGE_TAIL_FILL, build_batch
from hinge.testing.reference import reference_attention
from hinge_fa4.backend import FA4AttentionBackend
from hinge_fa4.options import FA4Options

LAYER = AttentionLayer(kv_layer_id=0, num_heads=8, num_kv_heads=2, head_dim=16, scale=0.25)


def backend(page_size=16, dtype=torch.float64, **options):
    options.setdefault("kernel", "reference")
    build = BuildContext(device="cpu", dtype=dtype, deterministic=False, page_size=page_size)
    return FA4AttentionBackend(FA4Options(**options), build)


def run(attn, case):
    case.batch.attn_metadata = attn.prepare_metadata(case.batch)
    return attn.forward(case.q, case.k, case.v, case.layer, case.kv, case.batch), case.batch.attn_metadata


@pytest.mark.parametrize("prefix, extend, phase", [
    ([300, 17, 64, 129], [1, 1, 1, 1], "decode"),
    ([120, 47, 250], [4, 4, 4], "verify"),
])
@pytest.mark.parametrize("layer", [LAYER, AttentionLayer(0, 8, 2, 16, 0.25, logit_softcap=2.0)],
                         ids=["plain", "softcap"])
@pytest.mark.parametrize("tail", ["short", "long"])
def test_a_split_decode_equals_one_attention_over_all_keys_in_float64(prefix, extend, phase, layer, tail):
    attn = backend(split_kv="always", split_size=32, max_splits=4, split_tail=tail)
    case = build_batch(prefix, extend, layer=layer, page_size=16, dtype=torch.float64, phase=phase,
                       page_tail_fill=PAGE_TAIL_FILL)
    want = reference_attention(case.q, case.kv, layer, case.batch, k=case.k, v=case.v)
    out, meta = run(attn, case)
    assert meta.split is not None and meta.split.num_chunks == 4, "the split path ran"
    tails = meta.split.seqused_k.view(-1, meta.split.num_slots)[:, 0]
    assert int(tails.max()) > 32, "max_splits capped a long request: its tail is long"
    assert (out - want).abs().max() < 1e-10


def test_windowed_layers_do_not_split_and_stay_exact():
    layer = AttentionLayer(0, 8, 2, 16, 0.25, sliding_window=20)
    case = build_batch([300, 40], [1, 1], layer=layer, page_size=16, dtype=torch.float64, phase="decode",
                       page_tail_fill=PAGE_TAIL_FILL)
    want = reference_attention(case.q, case.kv, layer, case.batch, k=case.k, v=case.v)
    out, meta = run(backend(split_kv="always", split_size=32), case)
    assert meta.split is not None and (out - want).abs().max() < 1e-10


@pytest.mark.parametrize("mode, rows, splits", [
    ("auto", 4, True),      # 4 requests x 8 KV heads (no model config: the default) = 32 tiles
    ("auto", 8, False),     # 64 tiles: on the H200 the unsplit kernel was faster from here
    ("auto", 16, False),    # 128 tiles, one wave
    ("auto", 80, False),    # 640 tiles: the GPU is already full
    ("never", 1, False),
    ("always", 80, True),
])
def test_split_kv_auto_splits_only_when_the_work_tiles_fill_at_most_a_quarter_of_the_sms(mode, rows, splits):
    assert backend().num_kv_heads == 8 and backend().kernel.num_sms == 132
    case = build_batch([100] * rows, [1] * rows, layer=LAYER, page_size=16, dtype=torch.float32,
                       page_tail_fill=PAGE_TAIL_FILL)
    meta = backend(split_kv=mode, split_size=32).prepare_metadata(case.batch)
    assert (meta.split is not None) == splits


def test_prefill_and_mixed_steps_never_split():
    attn = backend(split_kv="always", split_size=16)
    for prefix, extend in (([100, 0], [1, 9]), ([0], [70])):
        case = build_batch(prefix, extend, layer=LAYER, page_size=16, dtype=torch.float32,
                           page_tail_fill=PAGE_TAIL_FILL)
        assert attn.prepare_metadata(case.batch).split is None


def test_with_every_decode_split_a_requests_bits_do_not_depend_on_its_batch():
    """float32: a request decoding alone, beside a longer one (more chunk slots) and beside
    short ones gives the same bits (fixed chunk positions, the merge's fixed order)."""
    attn = backend(dtype=torch.float32, split_kv="always", split_size=32, max_splits=16)

    def row(prefix, index, seeds):
        case = build_batch(prefix, [1] * len(prefix), layer=LAYER, page_size=16, dtype=torch.float32,
                           seeds=seeds, page_tail_fill=PAGE_TAIL_FILL)
        return run(attn, case)[0][case.rows_of(index)]

    alone = row([150], 0, [7])
    assert torch.equal(alone, row([500, 150], 1, [1, 7]))
    assert torch.equal(alone, row([150, 3, 40], 0, [7, 2, 3]))


def test_warmup_compiles_prefill_decode_and_the_split_call_per_layer_signature():
    attn = backend(dtype=torch.float32)
    calls = []
    real_varlen, real_split = attn.kernel.varlen, attn.kernel.split_decode

    inside_split = []

    def record(q, *args, **kw):
        if not inside_split:  # NOTE: the emulation's split call is a varlen call itself
            calls.append(("varlen", q.shape[0], kw["causal"], kw.get("window_left"), kw["softcap"]))
        return real_varlen(q, *args, **kw)

    def record_split(q, *args, **kw):
        calls.append(("split", q.shape[0], False, None, kw["softcap"]))
        inside_split.append(1)
        try:
            return real_split(q, *args, **kw)
        finally:
            inside_split.pop()

    attn.kernel.varlen, attn.kernel.split_decode = record, record_split
    layers = [LAYER, AttentionLayer(1, 8, 2, 16, 0.25), AttentionLayer(2, 8, 2, 16, 0.25, sliding_window=64),
              AttentionLayer(3, 8, 2, 16, 0.25, logit_softcap=30.0)]
    case = build_batch([0], [1], layer=AttentionLayer(3, 8, 2, 16, 0.25), page_size=16, dtype=torch.float32,
                       page_tail_fill=PAGE_TAIL_FILL)
    attn.warmup(layers, case.kv)
    assert set(calls) == {
        ("varlen", 256, True, None, None), ("varlen", 1, True, None, None), ("split", 2, False, None, None),
        ("varlen", 256, True, 63, None), ("varlen", 1, True, 63, None),  # windows never split
        ("varlen", 256, True, None, 30.0), ("varlen", 1, True, None, 30.0), ("split", 2, False, None, 30.0)}
    assert len(calls) == 8, "one call per variant and signature"


def test_a_split_size_off_the_page_grid_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="split_size 100 is not a multiple of page_size 16"):
        backend(split_size=100)


def test_the_real_kernel_needs_cuda():
    with pytest.raises(ValueError, match="runs its kernels on cuda, not cpu; use device cuda, or "
                                         "attention_options kernel=reference"):
        FA4AttentionBackend(FA4Options(), BuildContext(device="cpu", dtype=torch.bfloat16,
                                                       deterministic=False, page_size=128))


def test_decode_and_prefill_graph_shapes_of_one_size_get_their_own_metadata():
    """64 requests x 1 token (decode) and 64 tokens for 63 requests (prefill): both 64 x 64."""
    from hinge.batching import ForwardBatchBuilder, GraphShape

    attn = backend(dtype=torch.float32, split_size=32)
    builder = ForwardBatchBuilder(page_size=16, max_rows=66, max_pages=8, device="cpu")
    attn.init_graph_buffers(64, 64, 8)
    decode, prefill = GraphShape.decode(64), GraphShape.prefill(64, 63)
    for shape in (decode, prefill):
        attn.prepare_for_capture(builder.static_batch(shape).batch)
    assert len(attn._captured) == 2
    metas = list(attn._captured.values())
    assert metas[0].uniform and not metas[1].uniform and metas[1].max_seqlen_q == 64


#: decode steps replayed into a 4-request graph: long enough to split (chunks of 32 keys, at most
#: 4 per request), rows leaving between steps so stale chunk rows would read NaN pages
LONG_DECODE_STEPS = [([150, 40, 97, 300], [1] * 4), ([260, 2, 129], [1] * 3), ([64], [1]),
                     ([33, 190], [1, 1])]


@pytest.mark.parametrize("tail", ["short", "long"])
def test_a_captured_split_decode_replays_like_the_oracle_and_clears_its_padded_rows(tail):
    from hinge.testing.graphs import check_graph_replay

    attn = backend(dtype=torch.float32, split_kv="always", split_size=32, max_splits=4, split_tail=tail)
    check_graph_replay(attn, "decode", LAYER, 16, torch.float32, device="cpu", num_pages=64,
                       steps=LONG_DECODE_STEPS, page_tail_fill=PAGE_TAIL_FILL)
    (meta,) = attn._captured.values()
    assert meta.split is not None and meta.split.num_chunks == 4, "the graph captured the split path"
    max_pages = meta.page_table.shape[1]
    assert meta.split.page_table.shape == (4 * 5, max_pages - 4 * 2), (
        "slots of one tail and 4 chunks; rows as wide as a tail past the 4 chunks of 2 pages")


def test_nan_past_a_requests_length_in_its_last_page_reaches_the_output_as_in_the_kernel():
    """Why fa4 declares ``reads_page_tails``: the kernel loads a whole page per key tile and masks
    scores, so 0 x NaN in a page tail is NaN; the emulation does the same, and the zero-filled
    KV pool (or the kit's finite PAGE_TAIL_FILL) keeps the output finite."""
    from hinge_fa4.plugin import FA4_SPEC

    assert FA4_SPEC.capabilities.reads_page_tails
    attn = backend(split_kv="never")
    nan_tails = build_batch([20], [1], layer=LAYER, page_size=16, dtype=torch.float32)
    finite_tails = build_batch([20], [1], layer=LAYER, page_size=16, dtype=torch.float32,
                               page_tail_fill=PAGE_TAIL_FILL)
    assert torch.isnan(run(attn, nan_tails)[0]).all()
    assert torch.isfinite(run(attn, finite_tails)[0]).all()


def test_a_split_decode_through_the_triton_merge_equals_one_attention_in_float64(monkeypatch):
    """The merge the backend runs on CUDA, here under Triton's interpreter in float64."""
    from pathlib import Path

    import hinge_fa4
    import hinge_fa4.backend as backend_module
    from hinge.testing.triton_interpreter import load_interpreted, patch_interpreter

    patch_interpreter(monkeypatch)
    kernel = load_interpreted(Path(hinge_fa4.__file__).parent / "merge_triton.py",
                              "_interpreted_hinge_fa4_merge_triton_backend").merge_parts_triton
    monkeypatch.setattr(backend_module, "merge_parts", kernel)
    attn = backend(split_kv="always", split_size=32, max_splits=4)
    case = build_batch([300, 17, 129], [4, 4, 4], layer=LAYER, page_size=16, dtype=torch.float64,
                       phase="verify", page_tail_fill=PAGE_TAIL_FILL)
    want = reference_attention(case.q, case.kv, LAYER, case.batch, k=case.k, v=case.v)
    out, meta = run(attn, case)
    assert meta.split is not None and (out - want).abs().max() < 1e-10


@pytest.mark.parametrize("view", [True, False])
def test_one_query_row_with_its_kv_stored_reaches_the_kernel_as_a_stride0_view_and_stays_exact(view):
    """Batch-1 decode with the KV written by the layer (``kv_saved``): the slots read the one
    query row through a stride-0 view (no copy, no launch), and the output is the float64
    attention over all keys; ``split_query_view = False`` copies the row instead."""
    attn = backend(split_kv="always", split_size=32, max_splits=4, split_query_view=view)
    case = build_batch([300], [1], layer=LAYER, page_size=16, dtype=torch.float64, phase="decode",
                       page_tail_fill=PAGE_TAIL_FILL)
    want = reference_attention(case.q, case.kv, LAYER, case.batch, k=case.k, v=case.v)
    k_cache, v_cache = case.kv.k[0], case.kv.v[0]
    k_cache[case.batch.out_loc], v_cache[case.batch.out_loc] = case.k, case.v  # the layer's write
    seen = []
    split_decode = attn.kernel.split_decode

    def spy(q, *args, **kwargs):
        seen.append(q.stride(0))
        return split_decode(q, *args, **kwargs)

    attn.kernel.split_decode = spy
    case.batch.attn_metadata = attn.prepare_metadata(case.batch)
    nan = torch.full_like(case.k, float("nan"))
    out = attn.forward(case.q, nan, nan.clone(), LAYER, case.kv, case.batch, kv_saved=True)
    assert case.batch.attn_metadata.split.num_slots == 5, "4 chunks (capped) and a tail"
    assert seen == [0 if view else LAYER.num_heads * LAYER.head_dim]
    assert (out - want).abs().max() < 1e-10
