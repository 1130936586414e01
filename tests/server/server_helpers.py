"""Helpers the server tests share (imported as ``server_helpers``)."""

from __future__ import annotations

import time
from typing import Any


def kv_pages_used(server: Any) -> int:
    with server.client() as c:
        return c.get("/server_info").json()["stats"]["kv_pages_used"]


def wait_until_idle(server: Any, timeout: float = 20) -> dict:
    """Poll /server_info until no request runs or waits and no KV page is allocated."""
    deadline = time.monotonic() + timeout
    stats = {}
    with server.client() as c:
        while time.monotonic() < deadline:
            stats = c.get("/server_info").json()["stats"]
            if stats["kv_pages_used"] == 0 and stats["num_running"] == 0 \
                    and stats["num_waiting"] == 0:
                return stats
            time.sleep(0.05)
    raise AssertionError(f"server not idle after {timeout}s: {stats}")
