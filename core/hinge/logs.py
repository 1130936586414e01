"""Logging for the ``hinge`` command, and the start-up banner every engine logs once built.

``configure_logging`` sends the ``hinge.*`` loggers to stderr in one compact format
(``05-12 10:00:00 INFO hinge.startup: ...``), so stdout stays the command's own output (the
generated text, ``--json``). The level comes from ``--log-level``, else ``HINGE_LOG_LEVEL``, else
``info``. ``log_startup_banner(engine)`` logs, at INFO, what an operator checks first: model,
dtype, device, the plan (components and graph decisions with reasons), KV capacity in tokens, the
maximum concurrency and torch's thread count; at DEBUG also the whole resolved config.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LEVEL = "info"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%m-%d %H:%M:%S"

logger = logging.getLogger("hinge.startup")


def resolve_level(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """``--log-level`` if given, else ``HINGE_LOG_LEVEL``, else ``info``; a ValueError names the
    allowed levels."""
    env = os.environ if env is None else env
    source, value = ("--log-level", flag) if flag else ("HINGE_LOG_LEVEL", env.get("HINGE_LOG_LEVEL", ""))
    value = value.strip().lower()
    if not value:
        return DEFAULT_LEVEL
    if value not in LEVELS:
        raise ValueError(f"{source} must be one of {', '.join(LEVELS)}; got {value!r}")
    return value


def configure_logging(level: str, stream: Any = None) -> None:
    """Log ``hinge.*`` records at ``level`` and above to ``stream`` (stderr). Calling it again
    replaces the handler it added before; other loggers are left as they are."""
    root = logging.getLogger("hinge")
    for handler in [h for h in root.handlers if getattr(h, "hinge_cli", False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.hinge_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())


def banner_lines(engine: Any) -> list[str]:
    """The start-up banner of a built engine, from ``server_info()``, its plan and thread choice."""
    import torch

    info = engine.server_info()
    model, kv, versions = info["model"], info["kv_cache"], info["versions"]
    config = engine.config
    lines = [
        f"hinge {versions.get('hinge')} (torch {versions.get('torch')}, "
        f"transformers {versions.get('transformers')})",
        f"model: {model['path']} ({', '.join(model.get('architectures') or ['?'])}"
        f"{_weights(engine)}), max_model_len {info['max_model_len']}",
    ]
    lines += [f"plan: {line}" for line in engine.plan.describe()]  # device, dtype, components, graphs
    lines.append(f"deterministic (batch-invariant kernels): {'on' if config.deterministic else 'off'}")
    lines.append(_kv_line(kv, info.get("state_pool")))
    pages_per_request = math.ceil(info["max_model_len"] / kv["page_size"])
    fit = kv["pages"] // pages_per_request
    lines.append(f"concurrency: max_running_requests {config.max_running_requests}, "
                 f"chunked_prefill_size {config.chunked_prefill_size}; {fit} requests of "
                 f"max_model_len {info['max_model_len']} fit in the KV cache")
    frozen = getattr(engine, "frozen", None)
    lines.append(f"gc: {frozen.objects} start-up objects frozen (a full collection {frozen.full_pass_ms:.1f} ms "
                 f"before, {frozen.after_ms:.2f} ms after; hinge.engine.gc_freeze)" if frozen is not None else
                 f"gc: start-up heap not frozen (gc_freeze {config.gc_freeze} on {config.device})")
    choice = getattr(engine, "cpu_threads", None)
    threads = torch.get_num_threads()
    lines.append("torch threads: " + (choice.describe(threads) if choice is not None else str(threads)))
    return lines


def log_startup_banner(engine: Any) -> None:
    """Log ``banner_lines(engine)`` at INFO (and the resolved config at DEBUG), once per engine."""
    for line in banner_lines(engine):
        logger.info("%s", line)
    logger.debug("config: %s", engine.config.model_dump(mode="json"))


def _kv_line(kv: Mapping[str, Any], states: Mapping[str, Any] | None) -> str:
    line = f"KV cache: {kv['tokens']} tokens ({kv['pages']} pages of {kv['page_size']})"
    if states:
        line += (f"; recurrent-state pool: {states['slots']} slots, "
                 f"{states['bytes'] / 2**20:.2f} MiB, {str(states['state_dtype']).removeprefix('torch.')}")
    return line


def _weights(engine: Any) -> str:
    model = getattr(engine, "model", None)
    if model is None:
        return ""
    size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    return f", weights {size / 2**20:.1f} MiB"
