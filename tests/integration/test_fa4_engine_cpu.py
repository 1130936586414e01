"""The fa4 plugin inside the engine on CPU, through the torch emulation of its kernel: a tiny
Qwen3 generates what the torch reference generates, eager and with graphs captured as reruns,
with every decode split, and paired per phase with the torch backend. (Here, not in the plugin's
tests: plugins and their tests import only public modules, and this drives the engine.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from hinge import hookimpl
from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.plugins.plan import GraphDecision
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer
from hinge_fa4.plugin import FA4_SPEC

NAME = "fa4-emulated"
#: fa4's spec as its torch-emulated kernel runs: on CPU, float32, the tiny model's head dim 16
SPEC = FA4_SPEC.model_copy(update={
    "name": NAME, "availability": None,
    "capabilities": FA4_SPEC.capabilities.model_copy(update={
        "devices": frozenset({"cpu"}), "dtypes": frozenset({"float32"}), "page_sizes": frozenset({16}),
        "preferred_page_sizes": (), "head_dims": frozenset({16}), "min_compute_capability": None})})
OPTIONS = {"kernel": "reference", "split_kv": "always", "split_size": 16, "max_splits": 3}
PARAMS = SamplingParams(max_new_tokens=12, temperature=0.0, logprobs=True)


class Emulated:
    @hookimpl
    def register_attention_backends(self, register):
        register(SPEC)


@dataclass(frozen=True)
class _EntryPoint:
    name: str
    obj: Any
    value: str = "<in-process fa4 emulation>"
    dist: Any = None
    group: str = "hinge.plugins"

    def load(self) -> Any:
        return self.obj


@pytest.fixture(autouse=True)
def emulated_backend(monkeypatch):
    import hinge.plugins.manager as manager

    real = manager.get_plugin_manager

    def with_backend(settings=None, *, entry_points=None, builtins=True):
        eps = list(manager.md.entry_points(group=manager.ENTRY_POINT_GROUP)) \
            if entry_points is None else list(entry_points)
        return real(settings, entry_points=[*eps, _EntryPoint("fa4-test", Emulated())], builtins=builtins)

    monkeypatch.setattr(manager, "get_plugin_manager", with_backend)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("fa4-engine"), seed=5)
    write_byte_tokenizer(path)
    return path


def generate(path, graphs=None, **config):
    from hinge.engine.graphs import RerunGraph, capture_graphs

    eng = Engine(EngineConfig(model=str(path), device="cpu", cache="none", **config), progress=False)
    if graphs is not None:
        eng.runner.graphs = capture_graphs(graphs, eng.runner, graph_type=RerunGraph)
    prompts = [torch.randint(32, 127, (n,), generator=torch.Generator().manual_seed(n)).tolist()
               for n in (7, 30, 45)]
    rids = [eng.add_request(p, PARAMS) for p in prompts]
    done = {}
    while eng.has_unfinished():
        done.update({o.rid: o for o in eng.step() if o.finished})
    stats = eng.stats()
    eng.close()
    return [(done[r].token_ids, done[r].logprobs) for r in rids], stats


@pytest.fixture(scope="module")
def torch_outputs(model):
    return generate(model, attention="torch")[0]


def assert_same(got, want):
    for (tokens, lps), (w_tokens, w_lps) in zip(got, want, strict=True):
        assert tokens == w_tokens
        assert max(abs(a - b) for a, b in zip(lps, w_lps, strict=True)) <= 1e-4


def test_fa4_generates_what_the_torch_reference_generates(model, torch_outputs):
    got, _ = generate(model, attention=NAME, attention_options=OPTIONS)
    assert_same(got, torch_outputs)


def test_fa4_replays_captured_decode_and_prefill_graphs(model, torch_outputs):
    graphs = {"decode": GraphDecision("decode", True, "auto", sizes=(1, 2, 4), tokens_per_request=(1,)),
              "prefill": GraphDecision("prefill", True, "auto", sizes=(128,), max_requests=4)}
    got, stats = generate(model, graphs, attention=NAME, attention_options=OPTIONS)
    assert stats.graph_replays["decode"] > 0 and stats.graph_replays["prefill"] > 0
    assert_same(got, torch_outputs)


def test_fa4_for_prefill_with_torch_for_decode(model, torch_outputs):
    got, _ = generate(model, attention_prefill=NAME, attention_prefill_options=OPTIONS,
                      attention_decode="torch")
    assert_same(got, torch_outputs)
