"""The model's vote on CUDA graphs: which phases its layers and recurrent kernels can run inside a
captured graph. Asked while the plan is resolved (``resolve_plan(..., model_votes=model_votes)``,
as the engine and ``hinge plan`` do), from config.json alone: no weights are loaded.

A captured graph replays device work only: anything a layer computes on the host per step (index
tensors from ``cu_seqlens``, a ``.item()``, a per-step cache of device tensors) is frozen at its
capture-time value, or freed under the graph. Dense and MoE layers have none. Hybrid models
(``hinge.models.hybrid.HybridDecoderLM.graph_capture_eligibility``):

- decode, one token per request: the recurrent decode path (torch ``delta_rule_decode`` and the
  uniform conv window, fla's ``fused_recurrent_gated_delta_rule``) has no host list: allowed;
- decode with q > 1 tokens per request (verify shape): the short conv is uniform (allowed), the
  gated delta rule runs its chunked path, whose padded-bucket layout is built on the host: vetoed;
- prefill: the chunk and conv layouts of variable-length requests are built on the host (and fla
  derives its chunk indices from ``cu_seqlens`` on the host): vetoed with that reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hinge.plugins.capabilities import GraphVerdict
    from hinge.plugins.plan import ResolvedPlan


def model_votes(phase: str, plan: ResolvedPlan, info: dict[str, Any]) -> list[tuple[str, GraphVerdict]]:
    """``[(who, verdict)]`` of the model class config.json names; [] for no opinion (or a model the
    loader will reject with its own error)."""
    from hinge.models.registry import resolve_architecture

    try:
        cls = resolve_architecture(info.get("architectures"))
    except ValueError:
        return []
    verdict = cls.graph_capture_eligibility(
        phase, tokens_per_request=plan.config.graphs.tokens_per_request, kernels="auto")
    return [] if verdict is None else [(f"model {cls.__name__}", verdict)]
