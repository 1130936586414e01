"""Frozen capability models: what a component can do, declared as data and tested by the kit.

Defaults are conservative: no CUDA graph for any phase, no sliding window, not batch invariant.
A claim is a promise the contract tests in ``hinge.testing`` check (a backend that claims a page
size is run with it; a graph claim gets a capture test marked ``gpu``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Device = Literal["cpu", "cuda"]
DType = Literal["float32", "bfloat16", "float16"]
GraphPhase = Literal["prefill", "decode", "draft"]
GRAPH_PHASES: tuple[GraphPhase, ...] = ("prefill", "decode", "draft")
ALL_DTYPES: frozenset[str] = frozenset({"float32", "bfloat16", "float16"})


class Capabilities(BaseModel):
    """What every kind declares. ``<phase>_graph`` = the component may run inside a CUDA graph
    captured for that phase (its metadata lives in static buffers refilled on replay)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    devices: frozenset[Device] = frozenset({"cpu", "cuda"})
    #: lowest CUDA compute capability, e.g. (10, 0) for Blackwell-only kernels; None = any
    min_compute_capability: tuple[int, int] | None = None
    dtypes: frozenset[DType] = ALL_DTYPES
    prefill_graph: bool = False
    decode_graph: bool = False
    draft_graph: bool = False
    #: results independent of batch composition and chunking (``deterministic = true``)
    batch_invariant: bool = False
    #: why a graph is not supported, shown by ``hinge plan`` (e.g. "host-side metadata per step")
    graph_note: str = ""

    def to_dict(self) -> dict:
        """JSON-ready, with sets as sorted lists (stable output for ``hinge plugins --json``)."""
        out = {}
        for key, value in self.model_dump(mode="python").items():
            if isinstance(value, (set, frozenset)):
                value = sorted(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[key] = value
        return out

    def supports_graph(self, phase: GraphPhase) -> bool:
        return bool(getattr(self, f"{phase}_graph"))

    @field_validator("devices", "dtypes")
    @classmethod
    def _not_empty(cls, value: frozenset[str]) -> frozenset[str]:
        if not value:
            raise ValueError("must name at least one entry")
        return value


#: how a KV page is laid out: ``nhd`` = each layer's K and V are separate tensors of
#: ``(num_pages * page_size, num_kv_heads, head_dim)``, i.e. pages of ``(page_size,
#: num_kv_heads, head_dim)`` (what hinge's KV pool builds); ``hnd`` = pages of ``(num_kv_heads,
#: page_size, head_dim)`` (declarable, refused by the plan: no pool builds it yet)
KVLayout = Literal["nhd", "hnd"]
POOL_KV_LAYOUT: KVLayout = "nhd"


class AttentionCapabilities(Capabilities):
    """What an attention backend runs, and the KV pool it reads (page sizes, page layout, KV
    dtype). The plan picks a page size every selected attention backend takes
    (``hinge.plugins.kv_layout``) and refuses a model needing a feature none declares."""

    #: tokens per KV page the backend accepts; None = any page size
    page_sizes: frozenset[int] | None = None
    #: page sizes it runs best with, best first (e.g. ``(128,)`` for a TMA path whose tile is a
    #: page); the plan picks the first every selected backend takes when page_size is not set
    preferred_page_sizes: tuple[int, ...] = ()
    #: the page layout it reads (``KVLayout``)
    kv_layout: KVLayout = POOL_KV_LAYOUT
    #: KV cache dtypes it reads; None = any of ``dtypes`` (the pool holds KV in the model dtype)
    kv_dtypes: frozenset[DType] | None = None
    #: head dims it accepts; None = any
    head_dims: frozenset[int] | None = None
    sliding_window: bool = False
    #: the kernel loads whole pages (a key tile is a page) and masks scores, not loads: the
    #: slots of a request's last page past its length must hold finite values (0 x NaN is NaN).
    #: The KV pool is zero-filled at creation, so they do; the kit fills them with a finite
    #: sentinel (``hinge.testing.batches.PAGE_TAIL_FILL``) instead of NaN for such a backend
    reads_page_tails: bool = False
    #: ``AttentionLayer.logit_softcap``: scores become ``cap * tanh(scores / cap)``
    logit_softcap: bool = False
    #: ``forward(..., kv_saved=True)``: the layer has already stored this step's keys and values
    #: at ``batch.out_loc`` (its rotary kernel writes them: one launch fewer a layer); the
    #: backend then reads them from the pool only and writes nothing there (``AttentionBackend.forward``)
    kv_written_by_layer: bool = False
    #: batches it can run: prefill, decode, mixed (both in one step), verify (k+1 per request)
    phases: frozenset[Literal["prefill", "decode", "mixed", "verify"]] = frozenset(
        {"prefill", "decode", "mixed", "verify"}
    )

    @field_validator("page_sizes", "head_dims")
    @classmethod
    def _positive(cls, value: frozenset[int] | None) -> frozenset[int] | None:
        if value is not None and (not value or min(value) <= 0):
            raise ValueError("must be None (any) or a non-empty set of positive integers")
        return value

    @field_validator("kv_dtypes")
    @classmethod
    def _kv_not_empty(cls, value: frozenset[str] | None) -> frozenset[str] | None:
        if value is not None and not value:
            raise ValueError("must be None (the model dtype) or name at least one dtype")
        return value

    @model_validator(mode="after")
    def _preferred_are_accepted(self) -> AttentionCapabilities:
        bad = [p for p in self.preferred_page_sizes
               if p <= 0 or (self.page_sizes is not None and p not in self.page_sizes)]
        if bad:
            raise ValueError(f"preferred_page_sizes {bad} must be positive and among page_sizes "
                             f"{sorted(self.page_sizes or [])}")
        return self


class QuantizerCapabilities(Capabilities):
    #: ``quant_method`` / ``quant_algo`` values of checkpoints it claims (lowercase); empty = none
    checkpoint_methods: frozenset[str] = frozenset()
    weight_formats: frozenset[str] = frozenset()
    #: unquantized checkpoints (no ``quantization_config``) are claimed
    claims_unquantized: bool = False


class SpeculatorCapabilities(Capabilities):
    max_draft_tokens: int = Field(1, ge=1)
    #: target hidden states the drafter reads: none, the last layer, or chosen layers
    hidden_state_mode: Literal["none", "last", "layers"] = "none"
    #: verify needs the recurrent state after every position (hybrid models)
    needs_state_tracking: bool = False
    #: the draft model keeps its own KV cache
    has_draft_kv: bool = True


class CacheCapabilities(Capabilities):
    prefix_sharing: bool = False
    #: stores recurrent-state checkpoints of hybrid models
    recurrent_state: bool = False
    #: the KV page size must be a multiple of this
    page_size_multiple: int = Field(1, ge=1)


class GrammarCapabilities(Capabilities):
    """A grammar backend's masks are made on the host and applied outside captured graphs, so
    its graph flags stay False; what it declares is the constraints it compiles."""

    #: ``Grammar.kind`` values it compiles
    kinds: frozenset[Literal["json_schema", "json_object", "regex", "ebnf"]] = frozenset(
        {"json_schema", "json_object", "regex", "ebnf"}
    )
    #: its matchers undo accepted tokens (``GrammarMatcher.rollback``; speculative decoding)
    rollback: bool = True


class GraphVerdict(BaseModel):
    """Returned by ``graph_capture_eligibility``: ``allow=False`` is a veto and carries a reason."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: bool
    reason: str = ""
    #: largest batch a captured graph may have; the smallest across verdicts wins
    max_batch: int | None = Field(None, ge=1)
