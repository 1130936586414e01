"""What ``hinge plugins [--json]`` and ``hinge plan [--json]`` print. Both return the text;
the CLI prints it. Neither loads weights nor initialises CUDA (beyond asking the GPU's compute
capability when ``device = cuda``). Errors raise ``PluginError`` / ``PlanError`` /
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
    return get_plugin_manager(settings).listing()


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
