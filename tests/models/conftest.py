from __future__ import annotations

import pytest
import torch

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


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine: intra-op threads cost more than they give
    (a greedy-batch test takes 16 s with them, under 1 s without). Restored after each test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
