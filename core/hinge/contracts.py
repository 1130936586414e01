"""The hot-path interfaces plugins implement: plain objects the engine calls every step.

Hooks (``hinge.plugins.hookspecs``) run once at build time and hand the core *specs*; a spec's
factory builds one of the objects below. Nothing here calls pluggy. Each class has a matching
contract test class in ``hinge.testing`` that a plugin's own tests subclass. The data a step
carries (``ForwardBatch``, ``ForwardContext``, ``ForwardOutput``, ``KVCache``, ...) lives in
``hinge.forward`` and is re-exported here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

# the floor: what a step carries and the pool views (re-exported so plugins import one module)
from hinge.forward import (
    ForwardBatch,
    ForwardContext,
    ForwardOutput,
    KVCache,
    Phase,
    PositionStates,
    RecurrentLayerSpec,
    RecurrentStates,
)

__all__ = [
    "AttentionBackend", "AttentionLayer", "CacheContext", "CacheHit", "CachePolicy", "CheckpointPlan",
    "CheckpointSlots", "ForwardBatch", "ForwardContext", "PagePoolView",
    "ForwardOutput", "KVCache", "Phase", "PositionStates", "Quantizer", "RecurrentLayerSpec",
    "RecurrentStates", "Speculator",
]

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import torch
    from torch import nn

    from hinge.plugins.capabilities import (
        AttentionCapabilities,
        CacheCapabilities,
        QuantizerCapabilities,
        SpeculatorCapabilities,
    )


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionLayer:
    """Static description of one attention layer, fixed at model build."""

    kv_layer_id: int  #: index into the KV pool (attention layers only, numbered densely)
    num_heads: int
    num_kv_heads: int
    head_dim: int
    scale: float
    sliding_window: int | None = None  #: keys older than ``pos - sliding_window + 1`` are masked
    causal: bool = True
    #: attention-logit softcap (Gemma 2's ``attn_logit_softcapping``): scaled scores ``s`` become
    #: ``cap * tanh(s / cap)`` before the mask and softmax; None = off. Backends that do not
    #: declare ``AttentionCapabilities.logit_softcap`` are refused for such models at plan time
    logit_softcap: float | None = None


class AttentionBackend(ABC):
    """Paged attention over the KV pool.

    Per step the runner calls ``prepare_metadata(batch)`` once, stores the result on
    ``batch.attn_metadata``, then every attention layer calls ``forward``. Metadata is never a
    module global. The graph methods are only called when the plan gives a phase a CUDA graph.
    """

    capabilities: AttentionCapabilities

    @abstractmethod
    def prepare_metadata(self, batch: ForwardBatch) -> Any:
        """Build the per-step metadata (host-side work happens here, once). Does not mutate KV."""

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        kv: KVCache,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Write ``k``/``v`` into ``kv`` at ``batch.out_loc`` and attend.

        :param q: (T, num_heads, head_dim) in the model dtype.
        :param k: (T, num_kv_heads, head_dim).
        :param v: (T, num_kv_heads, head_dim).
        :returns: (T, num_heads, head_dim). Query row ``t`` of request ``i`` at absolute position
            ``p`` sees keys ``0..p`` of request ``i`` (causal), limited by ``layer.sliding_window``.

        A backend whose capabilities claim ``kv_written_by_layer`` also takes the keyword
        ``kv_saved``: True when the layer has already stored ``k``/``v`` at ``batch.out_loc``
        (fused into its rotary kernel); it then writes nothing to the pool and reads this step's
        keys and values from it (``k`` and ``v`` may be anything: the contract kit passes NaN).
        Others are never passed the keyword.
        """

    def warmup(self, layers: Sequence[AttentionLayer], kv: KVCache) -> None:
        """Run every kernel this backend will launch once, at start-up, so just-in-time
        compilation (and its on-disk cache) happens before the first request and before any graph
        capture. Called once by the engine after the KV pool exists; may write into the reserved
        page 0 only. ``layers`` are the model's attention layers (head counts, head dims, scales,
        windows). Default: nothing (a backend without JIT kernels needs no warm-up)."""
        return None

    # -- CUDA graphs (only when ``capabilities`` claim ``decode_graph`` / ``prefill_graph``) ----
    #
    # The graph runner (``hinge.engine.graphs``) owns the static *inputs* of every captured shape
    # (``hinge.batching.StaticBatch``: input_ids, positions, out_loc, logits_indices, extend/prefix
    # lens, page_table rows, state_slots, rows); the backend owns its static *metadata*. At start:
    # ``init_graph_buffers`` once, then for each shape, largest first: ``prepare_for_capture``, one
    # warm-up forward, capture. Before every replay: the runner copies the live step into the static
    # inputs and pads them, then calls ``prepare_for_replay``; then the graph replays.
    #
    # Padded rows (invariant 4; ``hinge.batching.pad_extend_lens`` is the one rule): rows
    # ``B..R-1`` of a shape with ``R`` request rows and ``N`` tokens are padding requests with
    # prefix 0, a page-table row of zeros (page 0 is reserved and holds garbage), state slot 0 and
    # builder row 0; the ``N - T`` padded tokens are spread over them in order, as evenly as
    # possible (a decode-shaped graph of ``q`` tokens per request gives each padded row exactly
    # ``q``; a prefill-shaped graph may leave some padded rows with 0 tokens: zero-length requests
    # the backend must skip). A padded row with ``k`` tokens has positions ``0..k-1`` and writes its
    # KV at ``out_loc = position % page_size`` (page 0). Padded logit rows point at token row 0.
    # Nothing a padded row computes may reach a live row, and nothing a previous (larger) replay
    # left in the static metadata may survive into the next one.

    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int, max_pages: int) -> None:
        """Allocate the static metadata buffers for every shape the runner will capture.

        Called once, before any capture. Nothing is allocated later (a captured graph reads its
        buffers by address), so size them for the largest shape.

        :param max_batch_size: the most request rows of any captured shape (padding rows included).
        :param max_num_tokens: the most token rows of any captured shape.
        :param max_pages: page-table width (``batch.page_table.shape[1]`` of every static batch:
            pages of ``max_model_len``).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def prepare_for_capture(self, batch: ForwardBatch) -> None:
        """Set ``batch.attn_metadata`` to metadata living in the static buffers; once per shape.

        ``batch`` has the captured shape; its tensors are the runner's static inputs, filled with
        padding rows only, and its host lists (``extend_lens_cpu``, ``prefix_lens_cpu``) describe
        all ``R`` rows (``R = batch.batch_size``, ``N = batch.num_tokens``). The warm-up forward and
        the captured forward that follow call ``forward(..., batch)`` with this batch. Per-shape
        objects (e.g. one planned wrapper per batch size) are made here, not later.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def prepare_for_replay(self, batch: ForwardBatch, padded_batch_size: int) -> None:
        """Refill the static metadata for the live rows and reset the padded ones; before every
        replay, outside the graph.

        ``batch`` is the live step: ``B = len(batch.extend_lens_cpu) <= padded_batch_size`` live
        requests (host lists: live rows only), ``T = sum(batch.extend_lens_cpu)`` live tokens. Its
        device tensors are already the runner's static inputs of the captured shape (``N =
        batch.num_tokens`` token rows, ``padded_batch_size`` request rows), holding the live values
        in rows ``[:B]`` / tokens ``[:T]`` and the padding rows after them (see above);
        ``pad_extend_lens(batch.extend_lens_cpu, batch.num_tokens, padded_batch_size)`` gives every
        row's token count. Must not wait for the device (overlap scheduling prepares step n + 1
        while step n runs); host-to-device copies into the static buffers are fine (non-blocking,
        from host memory no later step overwrites before the copy ran).

        The kit (``hinge.testing.graphs.check_graph_replay``) captures 4 requests and replays
        fewer: page 0 holds zeros and every page no live request holds NaN, so a padded row that
        reads anything but page 0 (a stale row of an earlier, larger step) shows as NaN in its
        output, and a write outside ``out_loc`` as a changed KV slot.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")


# ---------------------------------------------------------------------------------------------
# quantization
# ---------------------------------------------------------------------------------------------


__all__ += ["LinearSpec", "MoESpec"]

PARALLEL_STYLES = ("replicated", "column", "row")  #: how a linear layer is split over ranks


@dataclass(frozen=True)
class LinearSpec:
    """One linear layer as the model builds it: what ``Quantizer.create_weights`` is told.

    A fused layer (``qkv_proj``, ``gate_up_proj``) is several checkpoint linears stacked along the
    output, computed as one GEMM: partition ``i`` has ``output_sizes[i]`` rows and is read from the
    checkpoint tensors named ``shard_names[i]`` (+ ``.weight``, ``.bias``, ``.weight_scale``, ...),
    loaded with ``shard_id = i``. Sizes are the full, unsharded ones. Under tensor parallelism a
    ``column`` layer keeps ``1 / world_size`` of every partition's rows, a ``row`` layer
    ``1 / world_size`` of the input columns (and its bias on rank 0 only, so the sum over ranks
    adds it once); ``replicated`` layers are whole on every rank.
    """

    prefix: str  #: the layer's module name: its parameters are ``{prefix}.{name}``
    input_size: int
    output_sizes: tuple[int, ...]
    shard_names: tuple[str, ...]  #: the checkpoint name of each partition (model namespace)
    bias: bool
    dtype: torch.dtype  #: the model dtype (activations, and plain weights)
    parallel: str = "replicated"  #: one of ``PARALLEL_STYLES``
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if len(self.output_sizes) != len(self.shard_names) or not self.output_sizes:
            raise ValueError(f"linear {self.prefix!r}: {len(self.output_sizes)} output sizes for "
                             f"{len(self.shard_names)} checkpoint names; give one size per name")
        if self.parallel not in PARALLEL_STYLES:
            raise ValueError(f"linear {self.prefix!r}: parallel={self.parallel!r}; use one of "
                             f"{', '.join(PARALLEL_STYLES)}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"linear {self.prefix!r}: rank {self.rank} is not in 0..{self.world_size - 1}")
        split = {"column": self.output_sizes, "row": (self.input_size,)}.get(self.parallel, ())
        bad = [s for s in split if s % self.world_size]
        if bad:
            raise ValueError(f"linear {self.prefix!r}: size {bad[0]} does not split into world_size="
                             f"{self.world_size} equal parts ({self.parallel}-parallel)")

    @property
    def output_size(self) -> int:
        return sum(self.output_sizes)

    @property
    def input_size_per_partition(self) -> int:
        """This rank's input features (what ``apply`` receives)."""
        return self.input_size // self.world_size if self.parallel == "row" else self.input_size

    @property
    def output_sizes_per_partition(self) -> tuple[int, ...]:
        """This rank's rows of each partition, in order."""
        if self.parallel == "column":
            return tuple(s // self.world_size for s in self.output_sizes)
        return self.output_sizes

    @property
    def output_size_per_partition(self) -> int:
        """This rank's output features (what ``apply`` returns)."""
        return sum(self.output_sizes_per_partition)


@dataclass(frozen=True)
class MoESpec:
    """The experts of one sparse MoE block, created, loaded and applied as one set.

    Parameters are stacked over experts and named ``w13_*`` (gate and up, stacked along the
    output: ``w13_weight`` is (E, 2 I, H), gate rows first) and ``w2_*`` (down: ``w2_weight`` is
    (E, H, I)). Checkpoint tensor ``{checkpoint_prefix}.{e}.{gate_name}.{x}`` loads into
    ``w13_{x}`` with ``shard_id="w1"``, ``{up_name}`` into ``w13_{x}`` with ``"w3"``, and
    ``{down_name}`` into ``w2_{x}`` with ``"w2"``, each with ``expert_id=e``. Under tensor
    parallelism every expert keeps ``1 / world_size`` of its intermediate size (w13 by rows, w2
    by columns).
    """

    prefix: str  #: module name of the expert set: its parameters are ``{prefix}.w13_weight``, ...
    num_experts: int
    hidden_size: int
    intermediate_size: int  #: per expert, full (unsharded)
    top_k: int
    dtype: torch.dtype
    activation: str = "silu"  #: applied to the gate half: ``act(x W1^T) * (x W3^T)``
    checkpoint_prefix: str = ""  #: ``""`` = ``prefix``
    gate_name: str = "gate_proj"
    up_name: str = "up_proj"
    down_name: str = "down_proj"
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.top_k <= self.num_experts:
            raise ValueError(f"experts {self.prefix!r}: top_k={self.top_k} must be in 1..{self.num_experts}")
        if not 0 <= self.rank < self.world_size or self.intermediate_size % self.world_size:
            raise ValueError(f"experts {self.prefix!r}: intermediate size {self.intermediate_size} does not "
                             f"split into world_size={self.world_size} parts (rank {self.rank})")

    @property
    def intermediate_size_per_partition(self) -> int:
        return self.intermediate_size // self.world_size

    def checkpoint_name(self, expert_id: int, shard_id: str) -> str:
        """The checkpoint prefix of one expert's projection: shard ``w1`` (gate), ``w3`` (up), ``w2`` (down)."""
        proj = {"w1": self.gate_name, "w3": self.up_name, "w2": self.down_name}[shard_id]
        return f"{self.checkpoint_prefix or self.prefix}.{expert_id}.{proj}"


class Quantizer(ABC):
    """Owns how linear layers and MoE experts store and apply their weights.

    - **Build.** The model creates every linear layer through ``create_weights(layer, spec)`` and
      every expert set through ``create_moe_weights(layer, spec)``. Each parameter (or persistent
      buffer) it registers carries a ``weight_loader`` attribute: ``(param, tensor, shard_id)`` for
      linears, ``(param, tensor, shard_id, expert_id)`` for experts. ``hinge.layers.weights`` has the
      generic ones (``linear_parameter``, ``linear_bias``, ``moe_parameter``): they place a
      partition's rows and cut this rank's shard, given the tensor's ``output_dim`` / ``input_dim``.
      A parameter without ``weight_loader`` is copied whole (unfused, unsharded layers only).
    - **Load.** For each checkpoint tensor the loader maps its name (the model's
      ``checkpoint_param_name``, then ``map_checkpoint_name`` below), finds the parameter and calls
      its ``weight_loader``. Every parameter and persistent buffer must receive its tensors: the
      loader names missing, unexpected and mis-shaped tensors.
    - **After loading**, ``process_weights_after_loading(layer)`` once per linear (a fused layer
      is one call that sees all its partitions) and ``process_moe_weights_after_loading(layer)``
      once per expert set: repack, transpose, fold scales.
    - **Run.** ``apply`` / ``apply_moe`` every step; graph-safe (no host syncs, static shapes).

    Which checkpoints a quantizer loads is declared, not coded: ``capabilities.checkpoint_methods``
    and ``claims_unquantized``, read by one rule (``hinge.plugins.checks.quantizer_claims``) that
    both ``quantizer = auto`` and the model loader use.
    """

    capabilities: QuantizerCapabilities
    #: batch-invariant results requested (``BuildContext.deterministic``); the default MoE path reads it
    deterministic: bool = False

    def claims(self, quant_config: dict | None) -> bool:
        """Whether this quantizer loads a checkpoint with this ``quantization_config`` (or modelopt
        ``hf_quant_config.json`` dict; None = unquantized). Decided by the declared capabilities;
        hinge does not call an override of this method."""
        from hinge.plugins.checks import quant_config_methods, quantizer_claims

        return quantizer_claims(self.capabilities, quant_config_methods(quant_config))

    @abstractmethod
    def create_weights(self, layer: nn.Module, spec: LinearSpec) -> None:
        """Register on ``layer`` the parameters of ``spec`` for this rank: at least what ``apply``
        reads, ``bias`` (``spec.output_size_per_partition``) when ``spec.bias``, else ``bias = None``.
        Each carries its ``weight_loader``; nothing is filled yet (the loader does that)."""

    def load_checkpoint_config(self, config: Any) -> None:
        """Read what this checkpoint's quantization config says, before the model is built.

        Called once by the model loader (``hinge.models.load_model``), after the claim check and
        before any ``create_weights``, with the checkpoint's ``hinge.models.base.ModelConfig``
        (``quantization_config``, ``hf_quant_config``, ``path``): excluded modules, which scales
        the files hold, KV-cache scales. A quantizer built without a checkpoint (the contract
        kit) is never told. Default: nothing (a format with no per-checkpoint settings)."""
        return None

    def map_checkpoint_name(self, name: str) -> str | None:
        """Rename a checkpoint tensor (after the model's own mapping), or None to ignore it.

        For tensors the format stores but this quantizer does not use, e.g. KV-cache scales
        (``*.k_proj.k_scale``) or, renamed, tensors whose names differ from the parameter names.
        Default: every name as is."""
        return name

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Repack or convert a linear layer's loaded weights (all partitions). Called once per layer."""
        return None  # optional: plain weights need nothing

    @abstractmethod
    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``x`` (..., spec.input_size_per_partition) -> (..., spec.output_size_per_partition), bias
        included (partitions side by side in ``spec.output_sizes`` order). Graph-safe."""

    def apply_gated(self, layer: nn.Module, x: torch.Tensor, activation: str) -> torch.Tensor | None:
        """Optional: a fused ``[gate | up]`` layer's ``act(gate) * up`` in one call, or None.

        ``layer`` has two equal partitions (``spec.output_sizes``: gate, then up); ``activation``
        is a name of ``hinge.layers.activation.ACTIVATIONS`` (the SwiGLU MLP asks with
        ``"silu"``). Returns (..., I), where I is one partition's width, equal to ``act(g) * u``
        computed in float32 from ``apply``'s output ``[g | u]`` and rounded once to its dtype (as
        ``hinge.layers.fast_triton.silu_mul`` does), or None when this quantizer has no fused
        path for this call (the caller then runs ``apply`` and the activation). Decided from
        shapes, dtypes and devices only: graph-safe. The MLP asks outside the deterministic mode
        only. Default: None (``hinge.testing.QuantizerContract`` checks any answer against
        ``apply``)."""
        return None

    # -- mixture of experts: all experts of a block at once --------------------------------------

    def create_moe_weights(self, layer: nn.Module, spec: MoESpec) -> None:
        """Register the stacked expert parameters (``w13_*``, ``w2_*``; see ``MoESpec``) on ``layer``.

        Default: unquantized ``w13_weight`` (E, 2 I, H) and ``w2_weight`` (E, H, I) in ``spec.dtype``.
        """
        from hinge.layers.fused_moe import create_unquantized_moe_weights

        create_unquantized_moe_weights(layer, spec)

    def process_moe_weights_after_loading(self, layer: nn.Module) -> None:
        """Repack the loaded expert weights. Called once per expert set."""
        return None

    def apply_moe(self, layer: nn.Module, x: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor) -> torch.Tensor:
        """The routed experts' weighted sum: ``out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t])``.

        :param x: (T, H) in the model dtype.
        :param topk_ids: (T, k) int64 expert ids, distinct per row.
        :param topk_weights: (T, k) routing weights in ``x``'s dtype.
        :returns: (T, H). With ``deterministic``, each row's terms are summed in ascending expert
            order and a row's result does not depend on the other rows. Graph-safe on CUDA (no
            host syncs). Default: the unquantized grouped GEMM of ``hinge.layers.fused_moe``.
        """
        from hinge.layers.fused_moe import fused_experts

        return fused_experts(x, layer.w13_weight, layer.w2_weight, topk_ids, topk_weights,
                             activation=layer.spec.activation, deterministic=self.deterministic)


# ---------------------------------------------------------------------------------------------
# prefix cache
# ---------------------------------------------------------------------------------------------


@dataclass
class CacheHit:
    """What ``CachePolicy.match`` found. Pages are safe to read only while the hit is locked."""

    length: int = 0  #: tokens covered by the hit (page aligned)
    pages: tuple[int, ...] = ()  #: KV page ids holding those tokens, in order
    #: hybrid models: the checkpoint slot holding the recurrent state after exactly ``length``
    #: tokens (every state kind: conv windows and SSM states of every layer). A hybrid hit without
    #: one cannot resume and is ignored; the request copies it into its own slot (never writes it).
    state_slot: int | None = None
    #: hybrid models: KV matched past ``length`` (the last state); the position on the checkpoint
    #: grid where the next prefill should keep a checkpoint so later requests can hit there
    branch: int | None = None
    handle: Any = None  #: policy-private; passed back to lock/unlock


class CheckpointSlots(Protocol):
    """The checkpoint region of the state pool as a cache policy sees it
    (``hinge.engine.state_pool.SlotAllocator``): each slot holds one recurrent state of every
    recurrent layer. The scheduler allocates a running request's checkpoint slots here; a slot
    handed to ``CachePolicy.insert`` belongs to the policy from then on, which frees it here when
    it evicts or drops that state."""

    num_total: int

    @property
    def num_free(self) -> int: ...

    @property
    def num_used(self) -> int: ...

    def allocate(self) -> int | None:
        """A free slot, or None when the region is full."""

    def free(self, slot: int) -> None: ...


class PagePoolView(Protocol):
    """The KV page allocator, read only (pages reach a policy through ``insert``)."""

    @property
    def num_usable(self) -> int: ...

    @property
    def num_free(self) -> int: ...


@dataclass(frozen=True)
class CacheContext:
    """What a cache policy may use, given once by the engine after the pools exist
    (``CachePolicy.attach``)."""

    page_size: int
    pages: PagePoolView
    #: checkpoint grid of hybrid models (tokens, a multiple of ``page_size``); 0 for dense models
    track_interval: int = 0
    #: the state pool's checkpoint region; None for dense models (or no checkpoint budget)
    checkpoint_slots: CheckpointSlots | None = None

    @property
    def recurrent(self) -> bool:
        """Hybrid model with a checkpoint budget: hits need a state checkpoint."""
        return self.checkpoint_slots is not None and self.track_interval > 0


@dataclass(frozen=True)
class CheckpointPlan:
    """A checkpoint a step should keep for one request (``CachePolicy.plan_checkpoint``)."""

    position: int  #: keep the recurrent state after this many tokens of the request
    #: keep it until the request is inserted, even when the request takes later checkpoints
    #: (a branch point); otherwise a later confirmed checkpoint replaces it
    keep: bool = False


class CachePolicy(ABC):
    """Decides which tokens' KV (and, for hybrid models, which recurrent states) stay in the pools
    for later requests to share.

    Lifecycle: built by its factory, then ``attach(context)`` once the KV and state pools exist.
    Per request: ``match`` at admission, ``lock`` while it runs, ``plan_checkpoint`` for each of its
    steps (hybrid models), ``insert_unfinished`` after each prefill chunk that leaves prompt tokens
    to go (policies with ``caches_unfinished``), ``insert`` with what the client received when it
    leaves (finished, aborted, retracted), then ``unlock``. Pages and checkpoint slots are conserved: every page
    offered to ``insert`` comes back exactly once (returned by ``insert``, ``evict`` or
    ``flush``), every checkpoint slot offered is freed exactly once into
    ``context.checkpoint_slots`` (by the policy, when it drops or evicts that state).
    """

    capabilities: CacheCapabilities
    context: CacheContext | None = None
    #: the engine offers running requests' computed prefixes (``insert_unfinished``), so a request
    #: admitted while another is in chunked prefill hits what that one computed so far
    caches_unfinished: bool = False

    def attach(self, context: CacheContext) -> None:
        """The pools the policy works over; called once by the engine before any request."""
        self.context = context

    @abstractmethod
    def match(self, tokens: list[int], *, salt: str | None = None) -> CacheHit:
        """Longest reusable prefix of ``tokens`` (hybrid: the deepest position with KV and a state
        checkpoint). Requests with different ``salt`` never share. Does not mutate what is cached
        (it may refresh recency); lock before using pages."""

    @abstractmethod
    def lock(self, hit: CacheHit) -> None:
        """Protect the hit's pages and state checkpoint from eviction until ``unlock``."""

    @abstractmethod
    def unlock(self, hit: CacheHit) -> None: ...

    @abstractmethod
    def insert(self, tokens: list[int], pages: list[int],
               checkpoints: Mapping[int, int] | None = None, *, salt: str | None = None) -> list[int]:
        """Offer a request's KV and state checkpoints. The engine offers a request when it leaves
        (finished, aborted, retracted), then unlocks its hit (a running request's prefix goes
        through ``insert_unfinished``, which keeps it locked).

        :param tokens: what the client received (invariant 2): prompt + returned output, trimmed
            past a stop or ``max_new_tokens``, never more than the tokens whose KV was computed.
        :param pages: the request's pages in order, covering at least ``tokens`` (pages past
            them are returned).
        :param checkpoints: position -> checkpoint slot, each written by the runner (receipt
            confirmed) and at most ``len(tokens)``; the policy keeps them or frees them.
        :returns: the pages the policy does not keep: the caller frees them.
        """

    def insert_unfinished(self, tokens: list[int], pages: list[int], hit: CacheHit,
                          checkpoints: Mapping[int, int] | None = None, *,
                          salt: str | None = None) -> CacheHit:
        """Offer a *running* request's computed prefix and move its lock onto it (called only when
        ``caches_unfinished``: after a prefill chunk that leaves prompt tokens to go).

        :param tokens: its tokens whose KV the launched steps computed, a whole number of pages
            (invariant 2 as for ``insert``).
        :param pages: its pages of ``tokens``, one per page.
        :param hit: its locked hit (admission's, or the previous ``insert_unfinished``'s).
        :param checkpoints: position -> slot, confirmed and no longer read by the request; kept or
            freed as by ``insert``. A slot the request still reads is never offered.
        :returns: the request's hit from now on, locked in place of ``hit`` (unlocked here, state
            lock included: the request copied that state when it was admitted). Its ``pages`` are
            the ones the request uses for its first ``len(pages)`` pages from now on: the policy's
            where it held those tokens already (the caller frees the request's own copies, which
            the policy does not hold), the request's otherwise (the policy's now, kept by the
            lock); ``length`` covers them, ``state_slot`` is None, ``branch`` is ``hit``'s.
            Default: keeps nothing, frees the checkpoints, returns ``hit``.
        """
        slots = self.context.checkpoint_slots if self.context is not None else None
        for slot in (checkpoints or {}).values():
            if slots is not None:
                slots.free(slot)
        return hit

    @abstractmethod
    def evict(self, num_pages: int) -> list[int]:
        """Free at least ``num_pages`` unlocked pages if possible (with the states on them);
        returns the freed page ids."""

    def evict_checkpoints(self, num_slots: int) -> int:
        """Free up to ``num_slots`` unlocked state checkpoints into ``context.checkpoint_slots``
        (their KV may stay cached); returns how many were freed. Default: none held."""
        return 0

    @abstractmethod
    def flush(self) -> list[int]:
        """Drop everything unlocked (checkpoint slots freed); returns the freed page ids."""

    def num_evictable_pages(self) -> int:
        return 0

    def plan_checkpoint(self, start: int, end: int, branch: int | None = None) -> CheckpointPlan | None:
        """Hybrid models: the checkpoint a request whose step covers tokens ``start..end - 1``
        should keep (``start < position <= end``), or None. ``branch`` is its hit's
        ``CacheHit.branch``. Default: none (no recurrent-state caching)."""
        return None

    def stats(self) -> dict[str, int]:
        """Counters for ``/metrics`` (e.g. cached pages, nodes, checkpoints, evictions)."""
        return {}


# ---------------------------------------------------------------------------------------------
# speculative decoding
# ---------------------------------------------------------------------------------------------


class Speculator(ABC):
    """Proposes draft tokens the target verifies in one step (see DESIGN.md section 2a)."""

    capabilities: SpeculatorCapabilities

    @property
    def hidden_layer_ids(self) -> tuple[int, ...]:
        """Target hidden states it needs, numbered as HF ``output_hidden_states``."""
        return ()

    @abstractmethod
    def propose(self, batch: Any) -> torch.Tensor:
        """(B, k) int64 draft tokens for the requests of ``batch``."""

    @abstractmethod
    def verify(self, batch: Any, target_logits: torch.Tensor) -> list[list[int]]:
        """Accepted tokens per request (the bonus token included)."""

    def commit(self, batch: Any, accepted: list[list[int]]) -> None:
        """Update drafter state after the engine kept exactly ``accepted``."""
        return None  # optional: stateless drafters need nothing


# ---------------------------------------------------------------------------------------------
# structured outputs (defined in hinge.grammar; re-exported so plugins import one module)
# ---------------------------------------------------------------------------------------------

from hinge.grammar import GrammarBackend, GrammarError, GrammarMatcher  # noqa: E402

__all__ += ["GrammarBackend", "GrammarError", "GrammarMatcher"]
