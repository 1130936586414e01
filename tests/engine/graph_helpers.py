"""Shared by the graph-runner tests: the graph-capable test backend as a plugin the engine can
select, engines with graphs attached (CPU: "replay" reruns the captured step over the same static
tensors; CUDA: real graphs from the plan), and a request driver."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "testing"))

from graph_backend import NAME, GraphBackendPlugin  # noqa: E402

from hinge.config import EngineConfig  # noqa: E402
from hinge.engine.engine import Engine  # noqa: E402
from hinge.plugins.plan import GraphDecision  # noqa: E402
from hinge.testing.engine_runs import run_requests

__all__ = ["NAME", "add_graph_backend", "decisions", "engine", "prompts", "run"]


@dataclass(frozen=True)
class _EntryPoint:
    name: str
    obj: Any
    value: str = "<in-process graph test backend>"
    dist: Any = None
    group: str = "hinge.plugins"

    def load(self) -> Any:
        return self.obj


def add_graph_backend(monkeypatch) -> None:
    """Every plugin manager built from now on also registers the test backend ``static_gather``."""
    import hinge.plugins.manager as manager

    real = manager.get_plugin_manager

    def with_backend(settings=None, *, entry_points=None, builtins=True):
        eps = list(manager.md.entry_points(group=manager.ENTRY_POINT_GROUP)) \
            if entry_points is None else list(entry_points)
        return real(settings, entry_points=[*eps, _EntryPoint("graph-test", GraphBackendPlugin())],
                    builtins=builtins)

    monkeypatch.setattr(manager, "get_plugin_manager", with_backend)


def decisions(decode=(), prefill=(), *, tokens_per_request=(1,), max_requests=4) -> dict:
    """Enabled graph decisions with these ladders (what a cuda plan would hand the engine)."""
    return {
        "decode": GraphDecision("decode", bool(decode), "auto", sizes=tuple(decode),
                                tokens_per_request=tuple(tokens_per_request)),
        "prefill": GraphDecision("prefill", bool(prefill), "auto", sizes=tuple(prefill),
                                 max_requests=max_requests),
    }


def engine(path, graphs: dict | None = None, **options) -> Engine:
    """An engine over ``path``; with ``graphs`` (decisions) on CPU, graphs captured as reruns."""
    from hinge.engine.graphs import RerunGraph, capture_graphs

    options.setdefault("attention", NAME)
    eng = Engine(EngineConfig(model=str(path), **options), progress=False)
    if graphs is not None:
        eng.runner.graphs = capture_graphs(graphs, eng.runner, graph_type=RerunGraph)
    return eng


def prompts(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(32, 127, (n,), generator=g).tolist() for n in lens]


def run(eng: Engine, prompt_list, params) -> list[tuple]:
    """Run to completion; per request (token ids, logprobs, prompt logprobs)."""
    return [(o.token_ids, o.logprobs, o.prompt_logprobs) for o in run_requests(eng, prompt_list, params)]


def assert_same_outputs(got, want, atol=1e-4, what="graph replay"):
    for i, ((tokens, lps, plps), (w_tokens, w_lps, w_plps)) in enumerate(zip(got, want, strict=True)):
        assert tokens == w_tokens, f"request {i}: {what} sampled other tokens than eager"
        for name, a, b in (("logprobs", lps, w_lps), ("prompt logprobs", plps, w_plps)):
            if b is None:
                continue
            diff = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
            assert diff <= atol, f"request {i}: {name} differ from eager by {diff:.3g}"
