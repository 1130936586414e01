"""Per-phase CUDA-graph decisions: every selected component must allow the phase, and neither a
``graph_capture_eligibility`` impl nor the model (``model_votes``) may veto it. Every decision
carries its reasons and, when on, the ladder of shapes the engine captures:

- decode: batch sizes 1, 2, 4, 8, then steps of 8 up to ``max_running_requests`` (capped by the
  smallest ``GraphVerdict.max_batch``; the cap itself is always on the ladder), each with every
  ``graphs.tokens_per_request`` (1 = decode, q > 1 = a speculative verify shape);
- prefill: token counts 64, 128, ..., 1024, then steps of 1024 up to the step budget
  (``chunked_prefill_size``, at most ``max_model_len``), each for up to ``max_running_requests``
  requests of any lengths (mixed steps included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from hinge.plugins.capabilities import GRAPH_PHASES, GraphVerdict
from hinge.plugins.checks import model_dict
from hinge.plugins.specs import KIND_LABELS

if TYPE_CHECKING:
    from hinge.plugins.manager import PluginManager
    from hinge.plugins.plan import GraphDecision, ResolvedPlan, SelectedComponent


def phase_components(plan: ResolvedPlan, phase: str) -> list[SelectedComponent]:
    """Components that run inside a step of ``phase``: that phase's attention backend
    (``ResolvedPlan.attention_for``) and the other slots; the drafter uses the decode one."""
    return plan.components_for(phase)


def phase_needs(plan: ResolvedPlan, phase: str) -> tuple[str, ...]:
    """What a captured step of ``phase`` must write besides logits."""
    needs = []
    spec = plan.speculator.spec.capabilities if plan.speculator else None
    if spec is not None and phase in ("prefill", "decode") and spec.hidden_state_mode != "none":
        needs.append(f"hidden states ({spec.hidden_state_mode}) for {plan.speculator.name}")
    if spec is not None and phase == "decode" and spec.needs_state_tracking:
        needs.append("per-position recurrent states (verify)")
    if plan.cache.spec.capabilities.recurrent_state and phase in ("prefill", "decode"):
        needs.append("recurrent-state checkpoints")
    return tuple(needs)


def eligibility_verdicts(pm: PluginManager, phase: str, plan: ResolvedPlan) -> list[tuple[str, GraphVerdict]]:
    """Every impl runs (attributed); None means no opinion."""
    from hinge.plugins.plan import PlanError

    out = []
    for impl in pm.hook.graph_capture_eligibility.get_hookimpls():
        kwargs = {"phase": phase, "plan": plan}
        try:
            verdict = impl.function(**{a: kwargs[a] for a in impl.argnames})
        except Exception as exc:
            raise PlanError(
                f"plugin {impl.plugin_name!r}: graph_capture_eligibility({phase!r}) raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if verdict is None:
            continue
        if not isinstance(verdict, GraphVerdict):
            raise PlanError(
                f"plugin {impl.plugin_name!r}: graph_capture_eligibility must return a GraphVerdict "
                f"or None, got {verdict!r}"
            )
        out.append((impl.plugin_name, verdict))
    return out


#: (phase, plan, model config dict) -> verdicts of the model and its kernels, each (who, verdict)
ModelVotes = Callable[[str, "ResolvedPlan", dict], Iterable[tuple[str, GraphVerdict]]]

DECODE_BASE_SIZES = (1, 2, 4, 8)
DECODE_SIZE_STEP = 8
PREFILL_MIN_TOKENS = 64
PREFILL_TOKEN_STEP = 1024


def decode_batch_sizes(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then steps of ``DECODE_SIZE_STEP`` up to ``max_batch``, which is always last."""
    sizes = [s for s in DECODE_BASE_SIZES if s < max_batch]
    sizes += range(2 * DECODE_SIZE_STEP, max_batch, DECODE_SIZE_STEP)
    return (*sizes, max_batch)


def prefill_token_counts(max_tokens: int) -> tuple[int, ...]:
    """Powers of two from ``PREFILL_MIN_TOKENS`` to ``PREFILL_TOKEN_STEP``, then steps of
    ``PREFILL_TOKEN_STEP``, up to ``max_tokens``, which is always last."""
    sizes, n = [], PREFILL_MIN_TOKENS
    while n < min(max_tokens, PREFILL_TOKEN_STEP):
        sizes.append(n)
        n *= 2
    sizes += range(PREFILL_TOKEN_STEP, max_tokens, PREFILL_TOKEN_STEP)
    return (*sizes, max_tokens)


def phase_ladder(plan: ResolvedPlan, phase: str, max_batch: int | None,
                 info: dict[str, Any]) -> dict[str, Any]:
    """``GraphDecision`` fields of an enabled phase: the sizes captured and their shape."""
    config = plan.config
    max_requests = min(config.max_running_requests, max_batch or config.max_running_requests)
    if phase == "decode":
        return {"sizes": decode_batch_sizes(max_requests),
                "tokens_per_request": config.graphs.tokens_per_request}
    if phase == "prefill":
        max_len = config.max_model_len or info.get("max_position_embeddings")
        budget = config.chunked_prefill_size if (config.chunked_prefill_size or 0) > 0 else max_len
        budget = min(budget or 8192, max_len or budget or 8192)
        return {"sizes": prefill_token_counts(budget), "max_requests": max_requests}
    return {}  # draft graphs: the speculator's own ladder (no speculator runs yet)


def decide_graphs(plan: ResolvedPlan, pm: PluginManager, model_info: Any = None,
                  model_votes: ModelVotes | None = None) -> dict[str, GraphDecision]:
    """One decision per phase. ``model_votes`` adds the model's verdicts to the hooks' (the
    plugin system imports no model: the caller passes ``hinge.models.graph_votes.model_votes``)."""
    from hinge.plugins.plan import GraphDecision, PlanError

    decisions: dict[str, GraphDecision] = {}
    errors: list[str] = []
    try:
        info = model_dict(plan.config, model_info)
    except Exception:  # noqa: BLE001 - a model that cannot be read is reported by the loader
        info = {}
    for phase in GRAPH_PHASES:
        mode = getattr(plan.config.graphs, phase)
        needs = phase_needs(plan, phase)
        if phase == "draft" and plan.speculator is None:
            decisions[phase] = GraphDecision(phase, False, mode, ("no speculator selected",))
            continue
        if mode == "off":
            decisions[phase] = GraphDecision(phase, False, mode, ("off by config",), needs)
            continue
        blockers = []
        if plan.device != "cuda":
            blockers.append(f"{plan.device}: CUDA graphs need device cuda")
        for c in phase_components(plan, phase):
            caps = c.spec.capabilities
            if not caps.supports_graph(phase):
                note = f" ({caps.graph_note})" if caps.graph_note else ""
                blockers.append(f"{c.name}: {KIND_LABELS[c.slot]} does not support {phase} graphs{note}")
        verdicts = eligibility_verdicts(pm, phase, plan)
        if model_votes is not None:
            verdicts += list(model_votes(phase, plan, info))
        blockers += [f"{who}: {v.reason or 'vetoed (no reason given)'}" for who, v in verdicts if not v.allow]
        caps_batch = [v.max_batch for _, v in verdicts if v.allow and v.max_batch is not None]
        max_batch = min(caps_batch) if caps_batch else None
        if blockers and mode == "require":
            errors.append(f"graphs.{phase} = require, but: " + "; ".join(blockers))
        ladder = phase_ladder(plan, phase, max_batch, info) if not blockers else {}
        decisions[phase] = GraphDecision(phase, not blockers, mode, tuple(blockers), needs, max_batch,
                                         **ladder)
    if errors:
        raise PlanError(
            "\n".join(errors) + "\nset graphs.<phase> = auto to run those phases eager, or change "
            "the components"
        )
    return decisions
