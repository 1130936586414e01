"""Hookimpls of the ``fa4`` plugin (registered through the ``hinge.plugins`` entry point).

Imports nothing heavy: the backend and the availability check are ``"module:attr"`` strings,
and flash_attn.cute is imported only when the backend is built.
"""

from __future__ import annotations

from hinge import hookimpl
from hinge.plugins import AttentionBackendSpec, AttentionCapabilities
from hinge_fa4.options import FA4Options

FA4_CAPABILITIES = AttentionCapabilities(
    devices=frozenset({"cuda"}),
    # sm_90 (the H200 here) and sm_100/sm_110 per the package; sm_120 has no paged KV
    # (the availability check says so)
    min_compute_capability=(9, 0),
    dtypes=frozenset({"bfloat16", "float16"}),
    # NOTE: any page size runs (cp.async path), but a page of one key tile (128 keys for head
    # dims <= 128 on sm_90) takes the TMA path: the only size claimed, and the plan's choice
    page_sizes=frozenset({128}),
    preferred_page_sizes=(128,),
    # sm_90 takes 8..256 in steps of 8; sm_100 <= 128 and 256: what the tests cover
    head_dims=frozenset({64, 96, 128, 256}),
    sliding_window=True,
    logit_softcap=True,
    # NOTE: a key tile is a page: slots past a request's length are loaded and masked in the
    # scores, so they must be finite (the KV pool is zero-filled; NaN there gives NaN out)
    reads_page_tails=True,
    # forward(..., kv_saved=True): the rope kernel stored the KV; the split path's prepare then
    # only expands the queries
    kv_written_by_layer=True,
    prefill_graph=True,
    decode_graph=True,
    # NOTE: a request's bits are the same alone or batched (fixed split sizes), but a prefill row
    # and a decode row of the same token take different kernels: not batch invariant
    batch_invariant=False,
    graph_note="",
)

FA4_SPEC = AttentionBackendSpec(
    name="fa4",
    factory="hinge_fa4.backend:FA4AttentionBackend",
    capabilities=FA4_CAPABILITIES,
    options_model=FA4Options,
    availability="hinge_fa4.availability:fa4_availability",
    description="FlashAttention-4 (flash-attn-4, CuTe DSL): paged prefill and decode over "
    "128-token pages, GQA, sliding window, softcap; decode splits long KV into fixed-size chunks "
    "merged by log-sum-exp (no split-KV on sm_90); JIT cache on disk",
)


@hookimpl
def register_attention_backends(register):
    register(FA4_SPEC)
