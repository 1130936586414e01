"""What ``hinge plugins [--json]`` and ``hinge plan [--json]`` print. Both return the text;
the CLI prints it. Neither loads weights nor initialises CUDA (beyond asking the GPU's compute
capability when a GPU is there). Errors raise ``PluginError`` / ``PlanError`` /
``ConfigError`` with a message fit to print as-is."""

from __future__ import annotations

import json as jsonlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hinge.config import EngineConfig


def plugin_listing(config: EngineConfig | None = None) -> list[dict[str, Any]]:
    """Every plugin (built-ins first): distribution, version, status, error, components.

    Never strict: this listing is how a user finds out why a plugin failed, so a failure is
    listed here even when ``plugins.strict`` would make it fatal for an engine."""
    from hinge.config import load_config
    from hinge.plugins.manager import get_plugin_manager

    config = config or load_config()
    settings = config.plugins.model_copy(update={"strict": False})
    pm = get_plugin_manager(settings)
    listing = pm.listing()
    _add_availability(pm, listing, None if config.device == "auto" else config.device)
    return listing


def _add_availability(pm: Any, listing: list[dict[str, Any]], device: str | None) -> None:
    """Each component's ``available`` / ``unavailable_reason`` on this machine
    (``hinge.plugins.availability``: declared devices and compute capability, then its own check)."""
    from hinge.plugins.availability import probe_machine, unavailable_reason

    machine = probe_machine(device)
    for p in listing:
        record = pm.records.get(p["name"])
        specs = {(c.kind, c.name): c.spec for c in (record.components if record else [])}
        for c in p["components"]:
            spec = specs.get((c["kind"], c["name"]))
            reason = unavailable_reason(spec, machine) if spec is not None else None
            c["available"], c["unavailable_reason"] = reason is None, reason


def cmd_plugins(json: bool = False, config: EngineConfig | None = None) -> str:
    listing = plugin_listing(config)
    if json:
        return jsonlib.dumps(listing, indent=2)
    lines = []
    for p in listing:
        dist = f"{p['distribution']} {p['version'] or ''}".strip() if p["distribution"] else "-"
        lines.append(f"{p['name']}  [{p['status']}]  {dist}  ({p['module']})")
        if p["error"]:
            lines.append("    error: " + p["error"].replace("\n", "\n           "))
        for c in p["components"]:
            caps = c["capabilities"]
            graphs = [ph for ph in ("prefill", "decode", "draft") if caps.get(f"{ph}_graph")]
            lines.append(
                f"    {c['kind']:<10} {c['name']:<16} devices {','.join(caps['devices'])}; "
                f"graphs {','.join(graphs) or 'none'}"
                + (f"; options {', '.join(c['options'])}" if c["options"] else "")
                + (f" - {c['description']}" if c["description"] else "")
            )
            if c.get("unavailable_reason"):
                lines.append(f"      unavailable here: {c['unavailable_reason']}")
            if c["conflicts_with"]:
                lines.append(f"      CONFLICT: also registered by {' and '.join(c['conflicts_with'])}; "
                             f"selecting {c['name']!r} fails until one of them is blocked or uninstalled")
    return "\n".join(lines)


def cmd_plan(config: EngineConfig, json: bool = False) -> str:
    from hinge.models.graph_votes import model_votes
    from hinge.plugins.plan import resolve_plan

    plan = resolve_plan(config, model_votes=model_votes)
    if json:
        return jsonlib.dumps(plan.to_dict(), indent=2)
    return "\n".join(plan.describe())
