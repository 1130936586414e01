"""Where the GPU tools leave their machine-readable results: ``$OUT/<name>`` as JSON when the
device call sets ``$OUT`` (the device tool brings that folder back), nowhere otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path


def save_json(name: str, payload: dict, indent: int = 2) -> Path | None:
    """Write ``payload`` to ``$OUT/name``; returns the path, or None without ``$OUT``."""
    out = os.environ.get("OUT")
    if not out:
        return None
    path = Path(out) / name
    path.write_text(json.dumps(payload, indent=indent))
    return path
