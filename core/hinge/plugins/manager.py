"""Discovery, failure capture and attributed registration of hinge plugins.

Entry points of the group ``hinge.plugins`` are loaded one by one: a plugin that fails to import,
or whose ``@hookimpl`` matches no hook (a misspelled name), is recorded (status ``failed`` and its
error, none of its components registered) and only matters when a component it may provide is
selected, or with ``plugins.strict``. The built-ins register through the same hooks, as the plugin
``hinge``. Registration calls each hookimpl separately with a ``register`` callback bound to its
plugin, so every component knows its owner. A name registered by two plugins is a conflict: both
are listed, and selecting that name is an error naming both (load order never decides).
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pluggy

from hinge import DISTRIBUTION
from hinge.plugins import hookspecs
from hinge.plugins.records import ComponentRecord, PluginRecord, normalize_name
from hinge.plugins.specs import KIND_LABELS, SPEC_TYPES

if TYPE_CHECKING:
    from hinge.config import PluginSettings

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hinge.plugins"
BUILTIN_PLUGIN = "hinge"


class PluginError(RuntimeError):
    """A plugin could not be loaded or registered; the message names plugin and distribution."""


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus the records ``hinge plugins`` lists and the per-slot registries."""

    def __init__(self, settings: PluginSettings | None = None) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.strict = bool(settings.strict) if settings else False
        self.allow = None if settings is None or settings.allow is None else list(settings.allow)
        self.block = list(settings.block) if settings else []
        self.records: dict[str, PluginRecord] = {}
        #: slot -> name -> a component of that name (when two plugins register it, either one:
        #: ``get_component`` refuses the name, see ``conflicts``)
        self.components: dict[str, dict[str, ComponentRecord]] = {k: {} for k in SPEC_TYPES}
        #: slot -> name -> every component registered under that name, when more than one is
        self.conflicts: dict[str, dict[str, list[ComponentRecord]]] = {k: {} for k in SPEC_TYPES}

    # -- loading ------------------------------------------------------------------------------

    def load_builtins(self) -> None:
        """Register hinge's own components: the entry point ``hinge`` of hinge's distribution in
        the group ``hinge.plugins`` (the plugin system itself imports no component)."""
        ep = builtin_entry_point()
        self._register_module(ep.load(), BUILTIN_PLUGIN, DISTRIBUTION, _version(DISTRIBUTION))

    def load_entry_points(self, entry_points: Iterable[Any] | None = None) -> None:
        """Load every entry point of ``hinge.plugins`` (or the given ones), one ``try`` each."""
        if entry_points is None:
            entry_points = md.entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(entry_points, key=lambda e: e.name):
            if _is_builtin(ep):
                continue  # loaded by load_builtins, whatever the allow and block lists say
            self._load_entry_point(ep)

    def _load_entry_point(self, ep: Any) -> None:
        dist = getattr(ep, "dist", None)
        dist_name = dist.name if dist is not None else None
        dist_version = dist.version if dist is not None else None
        if ep.name in self.records:
            first = self.records[ep.name]
            self._fail(
                PluginRecord(f"{ep.name}@{dist_name}", ep.value, dist_name, dist_version),
                f"plugin name {ep.name!r} is already used by {first.owner}; entry-point names "
                "in the group 'hinge.plugins' must be unique",
            )
            return
        record = PluginRecord(ep.name, ep.value, dist_name, dist_version)
        names = {normalize_name(ep.name)} | ({normalize_name(dist_name)} if dist_name else set())
        if names & {normalize_name(b) for b in self.block}:
            record.status = "blocked"
            self.records[ep.name] = record
            return
        if self.allow is not None and not names & {normalize_name(a) for a in self.allow}:
            record.status = "not allowed"
            self.records[ep.name] = record
            return
        try:
            module = ep.load()
        except Exception as exc:  # noqa: BLE001 - any import failure is recorded, not fatal
            self._fail(record, f"import failed: {type(exc).__name__}: {exc}", exc)
            return
        try:
            self._register_module(module, ep.name, dist_name, dist_version, record)
        except Exception as exc:  # noqa: BLE001 - e.g. pluggy's PluginValidationError
            self._fail(record, f"registration failed: {type(exc).__name__}: {exc}", exc)

    def _register_module(
        self,
        module: Any,
        name: str,
        dist: str | None,
        version: str | None,
        record: PluginRecord | None = None,
    ) -> None:
        record = record or PluginRecord(name, getattr(module, "__name__", None), dist, version)
        self.register(module, name=name)
        record.hooks = sorted(c.name for c in self.get_hookcallers(module) or [])
        self.records[name] = record

    def _fail(self, record: PluginRecord, error: str, exc: BaseException | None = None) -> None:
        record.status = "failed"
        record.error = error
        for component in record.components:
            self._withdraw(component)
        record.components = []
        existing = self.records.setdefault(record.name, record)
        if existing is record and self.get_plugin(record.name) is not None:
            self.unregister(name=record.name)
        if self.strict:
            raise PluginError(
                f"{record.owner}: {error}\n(strict plugins: any plugin failure is fatal; fix or "
                f"uninstall it, or block it with plugins.block / HINGE_PLUGINS_BLOCK)"
            ) from exc
        logger.warning("%s failed, its components are not available: %s", record.owner,
                       error.replace("\n", "; "))

    # -- checking -----------------------------------------------------------------------------

    def check_hooks(self) -> None:
        """Fail each plugin with a hookimpl that matches no hookspec (a misspelled name would be
        silently unused): it is recorded as failed with a did-you-mean hint, so none of its
        components register, and only selecting one (or ``plugins.strict``) makes it fatal."""
        known = sorted(n for n, c in vars(self.hook).items()
                       if isinstance(c, pluggy.HookCaller) and c.has_spec())
        problems: dict[str, list[str]] = {}
        for hook_name, caller in sorted(vars(self.hook).items()):
            if not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                if impl.optionalhook:
                    continue
                hint = difflib.get_close_matches(hook_name, known, n=1)
                problems.setdefault(impl.plugin_name, []).append(
                    f"hookimpl {hook_name!r} matches no hinge hook"
                    + (f"; did you mean {hint[0]!r}?" if hint else f"; hooks: {', '.join(known)}")
                )
        for plugin_name, lines in sorted(problems.items()):
            record = self.records.get(plugin_name)
            if record is None or plugin_name == BUILTIN_PLUGIN:
                # NOTE: not an installed plugin (the built-ins, or one registered by hand): no
                # record to mark as failed, so the mistake is fatal
                raise PluginError(f"plugin {plugin_name!r}: " + "\n".join(lines))
            self._fail(record, "\n".join(lines))
        self.check_pending()

    # -- registration -------------------------------------------------------------------------

    def collect_components(self) -> None:
        """Call every ``register_*`` impl with a ``register`` bound to its own plugin."""
        for slot, spec_type in SPEC_TYPES.items():
            caller = getattr(self.hook, spec_type.hook)
            for impl in caller.get_hookimpls():
                record = self.records[impl.plugin_name]
                if record.status != "ok":
                    continue

                def register(spec: Any, _slot: str = slot, _record: PluginRecord = record) -> None:
                    self._add_component(_slot, spec, _record)

                try:
                    impl.function(*[register for _ in impl.argnames])
                except PluginError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a failing plugin is isolated
                    self._fail(record, f"{spec_type.hook} raised {type(exc).__name__}: {exc}", exc)

    def _add_component(self, slot: str, spec: Any, record: PluginRecord) -> None:
        spec_type = SPEC_TYPES[slot]
        if not isinstance(spec, spec_type):
            raise TypeError(
                f"{spec_type.hook} must register {spec_type.__name__} objects, got {spec!r}"
            )
        registry = self.components[slot]
        component = ComponentRecord(slot, spec, record.name, record.distribution, record.version)
        record.components.append(component)
        if spec.name not in registry:
            registry[spec.name] = component
            return
        clash = self.conflicts[slot].setdefault(spec.name, [registry[spec.name]])
        clash.append(component)
        logger.warning("%s; selecting it fails until one is blocked or uninstalled",
                       _conflict_text(slot, spec.name, clash))

    def _withdraw(self, component: ComponentRecord) -> None:
        """Take a failed plugin's component out of the registry (and out of any conflict)."""
        registry = self.components[component.kind]
        clash = self.conflicts[component.kind].get(component.name)
        if clash is None:
            if registry.get(component.name) is component:
                del registry[component.name]
            return
        clash[:] = [c for c in clash if c is not component]
        registry[component.name] = clash[0]
        if len(clash) == 1:
            del self.conflicts[component.kind][component.name]

    # -- queries ------------------------------------------------------------------------------

    def names(self, slot: str) -> list[str]:
        return sorted(self.components[slot])

    def unavailable_plugins(self) -> list[PluginRecord]:
        return [r for r in self.records.values() if r.status != "ok"]

    def conflicts_with(self, component: ComponentRecord) -> list[str]:
        """The owners of the other components registered under this component's name."""
        clash = self.conflicts[component.kind].get(component.name, [])
        return sorted(c.owner for c in clash if c is not component)

    def get_component(self, slot: str, name: str) -> ComponentRecord:
        """The component registered under ``name``, or an error listing what is installed.

        A name that two plugins register is an error naming both, whatever their load order."""
        registry = self.components[slot]
        if name in self.conflicts[slot]:
            raise PluginError(
                f"{_conflict_text(slot, name, self.conflicts[slot][name])}; hinge does not pick one: "
                "uninstall one, or block it with plugins.block / HINGE_PLUGINS_BLOCK; "
                "see `hinge plugins`"
            )
        if name in registry:
            return registry[name]
        label = KIND_LABELS[slot]
        lines = [f"unknown {label} {name!r}; installed: {', '.join(self.names(slot)) or '(none)'}"]
        close = difflib.get_close_matches(name, self.names(slot), n=1)
        if close:
            lines[0] += f" (did you mean {close[0]!r}?)"
        for r in self.unavailable_plugins():
            why = r.error if r.status == "failed" else f"{r.status} by plugins config / HINGE_PLUGINS"
            why = (why or "").replace("\n", "\n    ")
            lines.append(f"  not loaded, may provide it: {r.owner}: {r.status}: {why}")
        lines.append("see `hinge plugins` for every plugin and its components")
        raise PluginError("\n".join(lines))

    def listing(self) -> list[dict[str, Any]]:
        """What ``hinge plugins --json`` prints: every plugin, built-ins first."""
        order = sorted(self.records.values(), key=lambda r: (r.name != BUILTIN_PLUGIN, r.name))
        return [r.to_dict(self.conflicts_with) for r in order]


def _conflict_text(slot: str, name: str, clash: list[ComponentRecord]) -> str:
    owners = sorted(c.owner for c in clash)
    times = "twice" if len(owners) == 2 else f"{len(owners)} times"
    return (f"{KIND_LABELS[slot]} {name!r} registered {times}: by "
            + ", ".join(owners[:-1]) + f" and by {owners[-1]}")


def _is_builtin(ep: Any) -> bool:
    dist = getattr(ep, "dist", None)
    return ep.name == BUILTIN_PLUGIN and dist is not None and dist.name == DISTRIBUTION


def builtin_entry_point() -> Any:
    """The installed entry point of hinge's built-in components, or an error saying how to fix."""
    try:
        eps = md.distribution(DISTRIBUTION).entry_points
    except md.PackageNotFoundError:
        eps = []
    for ep in eps:
        if ep.group == ENTRY_POINT_GROUP and ep.name == BUILTIN_PLUGIN:
            return ep
    raise PluginError(
        f"hinge's built-in components are not registered: no entry point {BUILTIN_PLUGIN!r} of "
        f"the distribution {DISTRIBUTION!r} in the group {ENTRY_POINT_GROUP!r}; install hinge "
        "with pip (`pip install -e .` in a checkout) so its entry points exist")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def get_plugin_manager(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[Any] | None = None,
    builtins: bool = True,
) -> PluginManager:
    """A loaded, checked plugin manager with every component registered.

    :param settings: ``EngineConfig.plugins`` (allow, block, strict); None = defaults.
    :param entry_points: the entry points to load instead of the installed ones (tests); ``[]``
        loads built-ins only.
    """
    pm = PluginManager(settings)
    if builtins:
        pm.load_builtins()
    pm.load_entry_points(entry_points)
    pm.check_hooks()
    pm.collect_components()
    for record in pm.records.values():
        logger.debug("%s: %s, components: %s", record.owner, record.status,
                     ", ".join(f"{c.kind} {c.name}" for c in record.components) or "(none)")
    return pm
