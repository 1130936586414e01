"""What the plugin manager records: each plugin (status, error, hooks) and each component
(its spec and owner). ``to_dict`` is what ``hinge plugins --json`` prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from hinge.plugins.specs import ComponentSpec

Status = Literal["ok", "failed", "blocked", "not allowed"]


@dataclass(frozen=True)
class ComponentRecord:
    """A registered component and who registered it."""

    kind: str  #: slot: attention, quantizer, cache, speculator
    spec: ComponentSpec
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def owner(self) -> str:
        return _owner(self.plugin, self.distribution, self.version)


@dataclass
class PluginRecord:
    name: str  #: the entry-point name (``hinge`` for the built-ins)
    module: str | None
    distribution: str | None
    version: str | None
    status: Status = "ok"
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    components: list[ComponentRecord] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return _owner(self.name, self.distribution, self.version)

    def to_dict(self, conflicts_with: Callable[[ComponentRecord], list[str]] | None = None
                ) -> dict[str, Any]:
        """JSON-ready; ``conflicts_with(component)`` names the other owners of its name (a
        conflict: selecting that name fails), listed under each component's ``conflicts_with``."""
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "hooks": sorted(self.hooks),
            "components": [
                {
                    "kind": c.kind,
                    "name": c.name,
                    "description": c.spec.description,
                    "options": sorted(c.spec.options_model.model_fields) if c.spec.options_model else [],
                    "capabilities": c.spec.capabilities.to_dict(),
                    "conflicts_with": conflicts_with(c) if conflicts_with else [],
                }
                for c in self.components
            ],
        }


def _owner(plugin: str, distribution: str | None, version: str | None) -> str:
    if distribution is None:
        return f"plugin {plugin!r}"
    return f"plugin {plugin!r} (distribution {distribution}{' ' + version if version else ''})"


def normalize_name(name: str) -> str:
    return name.lower().replace("_", "-")
