"""hinge: a plugin-architected LLM inference engine."""

from __future__ import annotations

from hinge.plugins.hookspecs import hookimpl

__all__ = ["hookimpl"]
