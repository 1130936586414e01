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
from typing import TYPE_CHECKING, Any

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
    "AttentionBackend", "AttentionLayer", "CacheHit", "CachePolicy", "ForwardBatch", "ForwardContext",
    "ForwardOutput", "KVCache", "Phase", "PositionStates", "Quantizer", "RecurrentLayerSpec",
    "RecurrentStates", "Speculator",
]

if TYPE_CHECKING:
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
        """

    # graph participation (optional; only when capabilities claim a graph level)
    def init_graph_buffers(self, max_batch_size: int, max_num_tokens: int) -> None:
        """Allocate the static metadata buffers a captured graph reads."""
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def prepare_for_replay(self, batch: ForwardBatch, padded_batch_size: int) -> None:
        """Refill static buffers for the live rows and clear the padded ones (invariant 4)."""
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")


# ---------------------------------------------------------------------------------------------
# quantization
# ---------------------------------------------------------------------------------------------


class Quantizer(ABC):
    """Owns how linear layers store and apply their weights.

    The model builds every linear layer through ``create_weights``; the loader copies checkpoint
    tensors into the parameters it created (by name), then calls ``process_weights_after_loading``.
    """

    capabilities: QuantizerCapabilities

    def claims(self, quant_config: dict | None) -> bool:
        """Whether this quantizer can load a checkpoint with this ``quantization_config``."""
        return quant_config is None

    @abstractmethod
    def create_weights(
        self, layer: nn.Module, in_features: int, out_features: int, bias: bool, dtype: torch.dtype
    ) -> None:
        """Register the parameters (at least ``weight``, plus ``bias`` when asked) on ``layer``."""

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Repack or convert loaded weights. Called once per layer after all weights load."""
        return None  # optional: plain weights need nothing

    @abstractmethod
    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``x`` (..., in_features) -> (..., out_features), bias included. Graph-safe."""


# ---------------------------------------------------------------------------------------------
# prefix cache
# ---------------------------------------------------------------------------------------------


@dataclass
class CacheHit:
    """What ``CachePolicy.match`` found. Pages are safe to read only while the hit is locked."""

    length: int = 0  #: tokens covered by the hit (page aligned)
    pages: tuple[int, ...] = ()  #: KV page ids holding those tokens, in order
    state_slot: int | None = None  #: recurrent-state checkpoint at ``length`` (hybrid models)
    handle: Any = None  #: policy-private; passed back to lock/unlock


class CachePolicy(ABC):
    """Decides which finished tokens stay in the KV pool for later requests to share."""

    capabilities: CacheCapabilities

    @abstractmethod
    def match(self, tokens: list[int]) -> CacheHit:
        """Longest cached prefix of ``tokens``. Does not mutate; lock before using pages."""

    @abstractmethod
    def lock(self, hit: CacheHit) -> None:
        """Protect the hit's pages (and state) from eviction until ``unlock``."""

    @abstractmethod
    def unlock(self, hit: CacheHit) -> None: ...

    @abstractmethod
    def insert(self, tokens: list[int], pages: list[int]) -> list[int]:
        """Offer a finished request's KV (``tokens`` already trimmed to what the client
        received, invariant 2). Returns the pages the policy does not keep: the caller frees them.
        """

    @abstractmethod
    def evict(self, num_pages: int) -> list[int]:
        """Free at least ``num_pages`` unlocked pages if possible; returns the freed page ids."""

    @abstractmethod
    def flush(self) -> list[int]:
        """Drop everything unlocked; returns the freed page ids."""

    def num_evictable_pages(self) -> int:
        return 0


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
