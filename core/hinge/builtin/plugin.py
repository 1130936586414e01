"""The built-in components, registered through the same hooks as any plugin (as plugin ``hinge``).

Factories are ``"module:attr"`` strings: nothing below imports torch or a kernel.
"""

from __future__ import annotations

from hinge.builtin.flashinfer_options import FlashInferOptions
from hinge.builtin.triton_options import TritonAttentionOptions
from hinge.builtin.xgrammar_backend import XGrammarOptions
from hinge.plugins.capabilities import (
    AttentionCapabilities,
    CacheCapabilities,
    GrammarCapabilities,
    QuantizerCapabilities,
)
from hinge.plugins.hookspecs import hookimpl
from hinge.plugins.specs import (
    AttentionBackendSpec,
    CachePolicySpec,
    GrammarBackendSpec,
    QuantizerSpec,
)

TORCH_ATTENTION = AttentionBackendSpec(
    name="torch",
    factory="hinge.builtin.torch_attention:TorchAttentionBackend",
    capabilities=AttentionCapabilities(
        sliding_window=True,
        logit_softcap=True,
        batch_invariant=True,
        kv_written_by_layer=True,
        graph_note="reference backend: builds its metadata on the host every step",
    ),
    description="reference paged attention in plain torch (GQA, causal, sliding window, "
    "logit softcap)",
)

TRITON_ATTENTION = AttentionBackendSpec(
    name="triton",
    factory="hinge.builtin.triton_attention:TritonAttentionBackend",
    capabilities=AttentionCapabilities(
        devices=frozenset({"cuda"}),
        min_compute_capability=(8, 0),
        sliding_window=True,
        batch_invariant=True,
        kv_written_by_layer=True,
        decode_graph=True,
        # NOTE: on the H200 (2026-12-01) a prefill graph's replay differed from eager (three
        # requests of 200/50/6 new tokens over 0/1000/3 cached) and an index assert followed
        prefill_graph=False,
        graph_note="prefill graphs: replay did not match eager on the H200; off until fixed",
    ),
    options_model=TritonAttentionOptions,
    description="paged attention in Triton: KV split at absolute positions (batch invariant, "
    "prefill row == decode row), metadata in static buffers for CUDA graphs",
)

FLASHINFER_ATTENTION = AttentionBackendSpec(
    name="flashinfer",
    factory="hinge.builtin.flashinfer_attention:FlashInferAttentionBackend",
    capabilities=AttentionCapabilities(
        devices=frozenset({"cuda"}),
        min_compute_capability=(8, 0),
        dtypes=frozenset({"bfloat16", "float16"}),
        head_dims=frozenset({64, 128, 256}),
        sliding_window=True,
        kv_written_by_layer=True,
        prefill_graph=True,
        decode_graph=True,
        draft_graph=True,
    ),
    options_model=FlashInferOptions,
    description="flashinfer paged prefill/decode (CUDA; JIT-compiled, cached on disk), planned "
    "outside CUDA graphs, one decode wrapper per captured batch size",
)

NO_QUANTIZER = QuantizerSpec(
    name="none",
    factory="hinge.builtin.no_quant:NoQuantizer",
    capabilities=QuantizerCapabilities(
        claims_unquantized=True,
        weight_formats=frozenset({"dense"}),
        batch_invariant=True,
        prefill_graph=True,
        decode_graph=True,
        draft_graph=True,
    ),
    description="unquantized weights in the model dtype",
)

NO_CACHE = CachePolicySpec(
    name="none",
    factory="hinge.builtin.no_cache:NoCachePolicy",
    capabilities=CacheCapabilities(
        batch_invariant=True, prefill_graph=True, decode_graph=True, draft_graph=True
    ),
    description="no prefix sharing: every request's pages are freed when it finishes",
)


XGRAMMAR = GrammarBackendSpec(
    name="xgrammar",
    factory="hinge.builtin.xgrammar_backend:build_xgrammar_backend",
    capabilities=GrammarCapabilities(),
    options_model=XGrammarOptions,
    description="structured outputs with xgrammar: JSON schema (any_whitespace off by "
    "default), any JSON object, regex and EBNF compiled to token bitmasks on the host",
)


@hookimpl
def register_attention_backends(register):
    register(TORCH_ATTENTION)
    register(FLASHINFER_ATTENTION)
    register(TRITON_ATTENTION)


@hookimpl
def register_quantizers(register):
    register(NO_QUANTIZER)


@hookimpl
def register_cache_policies(register):
    register(NO_CACHE)


@hookimpl
def register_grammar_backends(register):
    register(XGRAMMAR)
