"""hinge's HTTP server: sglang-native and OpenAI-compatible routes around an AsyncEngine."""

from __future__ import annotations

from hinge.server.app import DEFAULT_MAX_REQUEST_BYTES, build_app, serve

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "build_app", "serve"]
