from __future__ import annotations

import pytest
from hinge.testing.checkpoints import make_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """``tiny_checkpoint(arch)`` -> path of a cached seeded random checkpoint."""
    cache = {}

    def get(arch: str):
        if arch not in cache:
            cache[arch] = make_tiny_checkpoint(arch, tmp_path_factory.mktemp(arch))
        return cache[arch]

    return get
