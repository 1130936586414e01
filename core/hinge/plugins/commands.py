"""Subcommands that plugins add to ``hinge`` (hookspec ``register_commands``).

    hinge build_parser -> plugin manager (config from HINGE_* / defaults, never strict)
      -> every register_commands impl, with ``register`` bound to its plugin
      -> one subparser per command: add_arguments(parser); running it calls run(args)

A name hinge uses, or one that two plugins register, is refused (a warning names the owners);
a plugin that fails to load only loses its commands. ``hinge plugins`` lists the hook.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandSpec:
    """One ``hinge <name>`` subcommand: ``add_arguments(parser)`` adds its flags, ``run(args)``
    runs it and returns the exit status; either may be a ``"module:attr"`` string."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None] | str
    run: Callable[[argparse.Namespace], int] | str


def _resolve(obj: Any) -> Any:
    if not isinstance(obj, str):
        return obj
    module, _, attr = obj.partition(":")
    return getattr(importlib.import_module(module), attr)


def plugin_commands(pm: Any) -> dict[str, tuple[CommandSpec, str]]:
    """``{name: (spec, plugin)}`` of every command registered once; duplicates are dropped."""
    found: dict[str, list[tuple[CommandSpec, str]]] = {}
    for impl in pm.hook.register_commands.get_hookimpls():
        record = pm.records.get(impl.plugin_name)
        if record is not None and record.status != "ok":
            continue

        def register(spec: CommandSpec, _plugin: str = impl.plugin_name) -> None:
            if not isinstance(spec, CommandSpec):
                raise TypeError(f"register_commands must register CommandSpec objects, got {spec!r}")
            found.setdefault(spec.name, []).append((spec, _plugin))

        try:
            impl.function(*[register for _ in impl.argnames])
        except Exception as exc:  # noqa: BLE001 - a failing plugin loses its commands only
            logger.warning("plugin %r: register_commands raised %s: %s", impl.plugin_name,
                           type(exc).__name__, exc)
    out = {}
    for name, entries in found.items():
        if len(entries) > 1:
            owners = " and ".join(sorted(p for _, p in entries))
            logger.warning("command %r is registered by %s; neither is added (block one plugin)",
                           name, owners)
            continue
        out[name] = entries[0]
    return out


def add_plugin_commands(subparsers: Any) -> None:
    """Add every plugin command to ``hinge``'s subparsers (names hinge uses are refused)."""
    from hinge.config import load_config
    from hinge.plugins.manager import get_plugin_manager

    try:
        settings = load_config().plugins.model_copy(update={"strict": False})
        pm = get_plugin_manager(settings)
    except Exception as exc:  # noqa: BLE001 - the built-in commands must stay usable
        logger.debug("plugin commands not loaded: %s", exc)
        return
    for name, (spec, plugin) in sorted(plugin_commands(pm).items()):
        if name in subparsers.choices:
            logger.warning("plugin %r registers command %r, which hinge uses; it is not added",
                           plugin, name)
            continue
        parser = subparsers.add_parser(name, help=f"{spec.help} (plugin {plugin})")
        _resolve(spec.add_arguments)(parser)
        parser.set_defaults(func=lambda args, _spec=spec: _resolve(_spec.run)(args))
