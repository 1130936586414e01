"""Per-phase CUDA-graph decisions: every selected component must allow the phase, and no
``graph_capture_eligibility`` impl may veto it. Every decision carries its reasons."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hinge.plugins.capabilities import GRAPH_PHASES, GraphVerdict
from hinge.plugins.specs import KIND_LABELS

if TYPE_CHECKING:
    from hinge.plugins.manager import PluginManager
    from hinge.plugins.plan import GraphDecision, ResolvedPlan, SelectedComponent


def phase_components(plan: ResolvedPlan, phase: str) -> list[SelectedComponent]:
    """Components that run inside a step of ``phase`` (the drafter uses the attention backend)."""
    if phase == "draft":
        return [c for c in (plan.speculator, plan.attention) if c is not None]
    return plan.selected()


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


def decide_graphs(plan: ResolvedPlan, pm: PluginManager) -> dict[str, GraphDecision]:
    from hinge.plugins.plan import GraphDecision, PlanError

    decisions: dict[str, GraphDecision] = {}
    errors: list[str] = []
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
        blockers += [f"{who}: {v.reason or 'vetoed (no reason given)'}" for who, v in verdicts if not v.allow]
        caps_batch = [v.max_batch for _, v in verdicts if v.allow and v.max_batch is not None]
        max_batch = min(caps_batch) if caps_batch else None
        if blockers and mode == "require":
            errors.append(f"graphs.{phase} = require, but: " + "; ".join(blockers))
        decisions[phase] = GraphDecision(phase, not blockers, mode, tuple(blockers), needs, max_batch)
    if errors:
        raise PlanError(
            "\n".join(errors) + "\nset graphs.<phase> = auto to run those phases eager, or change "
            "the components"
        )
    return decisions
