"""Request bodies of real clients (tests/server/fixtures/*.json, written from the clients'
source: each names it under ``_source``), replayed so CI needs neither client."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def body(name: str) -> dict:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    data.pop("_source")
    return data
