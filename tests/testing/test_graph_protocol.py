"""The kit's CUDA-graph protocol check pads (capture at 4 requests, replay with fewer) and
catches a backend whose padded rows keep an earlier step's metadata (invariant 4). Runs on CPU:
the kit's "graph" reruns the captured call over the same static tensors."""

from __future__ import annotations

import pytest
import torch
from graph_backend import SPEC, STALE_SPEC

from hinge.plugins.specs import BuildContext
from hinge.testing import AttentionBackendContract
from hinge.testing.attention_contract import make_layer
from hinge.testing.graphs import check_graph_replay


class TestStaticGatherBackendPassesTheKit(AttentionBackendContract):
    """The test backend the graph-runner tests use passes every contract test, graphs included."""

    @pytest.fixture
    def spec(self):
        return SPEC


def _build(spec, page_size=16):
    return spec.build(None, BuildContext(device="cpu", dtype=torch.float32, deterministic=False,
                                         page_size=page_size))


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_a_backend_that_leaves_padded_rows_stale_fails_the_kit(phase):
    with pytest.raises(AssertionError, match="stale metadata of an earlier, larger step"):
        check_graph_replay(_build(STALE_SPEC), phase, make_layer(16), 16, torch.float32, "cpu")


def test_the_kit_replays_fewer_live_requests_than_it_captured():
    """Spy on what the backend is told: every replay is padded to the 4 captured rows."""
    seen = []

    class Spy(type(_build(SPEC))):
        def prepare_for_replay(self, batch, padded_batch_size):
            seen.append((batch.batch_size, padded_batch_size, batch.num_tokens,
                         batch.page_table.shape[0]))
            super().prepare_for_replay(batch, padded_batch_size)

    check_graph_replay(Spy(None, _build(SPEC).build), "decode", make_layer(16), 16, torch.float32,
                       "cpu")
    # (live requests, padded rows, token rows, page-table rows); the first is the capture's own
    assert seen == [(4, 4, 4, 4), (4, 4, 4, 4), (3, 4, 4, 4), (1, 4, 4, 4), (2, 4, 4, 4)]
