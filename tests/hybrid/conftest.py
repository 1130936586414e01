"""Session-wide tiny hybrid checkpoints (built once per architecture)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hybrid_harness import make_hybrid_checkpoint


@pytest.fixture(scope="session")
def hybrid_checkpoints(tmp_path_factory):
    cache: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("hybrid")

    def get(arch: str) -> Path:
        if arch not in cache:
            cache[arch] = make_hybrid_checkpoint(root, arch)
        return cache[arch]

    return get
