"""The graph runner's decisions (hinge.engine.graphs, hinge.plugins.graphs): ladders and their caps,
capture order, which steps replay and which run eager, and `require` turning a veto into a
start-up error that names the reason. CPU only (no step is timed)."""

from __future__ import annotations

import logging

import pytest
from graph_helpers import NAME, add_graph_backend, decisions, engine

from hinge.batching import GraphShape, StepSeq
from hinge.config import EngineConfig, load_config
from hinge.engine.engine import Engine
from hinge.engine.graphs import (
    GraphCaptureError,
    RerunGraph,
    capture_graphs,
    capture_order,
    ladder_shapes,
)
from hinge.models.graph_votes import model_votes
from hinge.plugins.graphs import decode_batch_sizes, prefill_token_counts
from hinge.plugins.plan import PlanError, resolve_plan

HYBRID_INFO = {"architectures": ["Qwen3_5ForCausalLM"], "max_position_embeddings": 4096,
               "layer_types": ["linear_attention", "full_attention"]}
DENSE_INFO = {"architectures": ["Qwen3ForCausalLM"], "max_position_embeddings": 4096}


# -- ladders ------------------------------------------------------------------------------------


def test_decode_ladder_is_powers_of_two_to_8_then_steps_of_8_and_always_ends_at_the_cap():
    assert decode_batch_sizes(64) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert decode_batch_sizes(20) == (1, 2, 4, 8, 16, 20)
    assert decode_batch_sizes(6) == (1, 2, 4, 6)
    assert decode_batch_sizes(1) == (1,)


def test_prefill_ladder_doubles_to_1024_then_steps_by_1024_to_the_budget():
    assert prefill_token_counts(8192) == (64, 128, 256, 512, 1024, 2048, 3072, 4096, 5120, 6144,
                                          7168, 8192)
    assert prefill_token_counts(3000) == (64, 128, 256, 512, 1024, 2048, 3000)
    assert prefill_token_counts(40) == (40,)


def _cuda_plan(monkeypatch, info=DENSE_INFO, **overrides):
    add_graph_backend(monkeypatch)
    import hinge.plugins.manager as manager

    config = load_config(env={}, overrides={"device": "cuda", "attention": NAME, **overrides})
    return resolve_plan(config, manager.get_plugin_manager(config.plugins), info,
                        device_capability=(9, 0), model_votes=model_votes)


def test_plan_ladders_follow_max_running_requests_chunk_budget_and_max_model_len(monkeypatch):
    plan = _cuda_plan(monkeypatch, max_running_requests=12, chunked_prefill_size=8192,
                      max_model_len=2000, graphs={"tokens_per_request": [1, 3]})
    decode, prefill = plan.graphs["decode"], plan.graphs["prefill"]
    assert decode.sizes == (1, 2, 4, 8, 12) and decode.tokens_per_request == (1, 3)
    assert prefill.sizes == (64, 128, 256, 512, 1024, 2000), "capped by max_model_len"
    assert prefill.max_requests == 12


def test_the_smallest_verdict_max_batch_caps_the_decode_ladder(monkeypatch):
    from hinge import hookimpl
    from hinge.plugins import GraphVerdict

    class Cap:
        @hookimpl
        def graph_capture_eligibility(self, phase, plan):
            return GraphVerdict(allow=True, max_batch=10) if phase == "decode" else None

    add_graph_backend(monkeypatch)
    from graph_helpers import _EntryPoint

    import hinge.plugins.manager as manager

    config = load_config(env={}, overrides={"device": "cuda", "attention": NAME, "cache": "none"})
    pm = manager.get_plugin_manager(config.plugins, entry_points=[_EntryPoint("cap", Cap())])
    plan = resolve_plan(config, pm, DENSE_INFO, device_capability=(9, 0))
    assert plan.graphs["decode"].sizes == (1, 2, 4, 8, 10)
    assert "batch sizes 1, 2, 4, 8, 10 x 1 token per request" in plan.graphs["decode"].describe()


def test_shapes_are_captured_largest_first():
    shapes = ladder_shapes(decisions(decode=(1, 2, 4), prefill=(16, 64), tokens_per_request=(1, 2)))
    assert [(s.num_tokens, s.num_requests) for s in shapes] == [
        (64, 5), (16, 5), (8, 4), (4, 4), (4, 2), (2, 2), (2, 1), (1, 1)]
    assert capture_order(reversed(shapes)) == shapes


# -- which steps replay -------------------------------------------------------------------------


@pytest.fixture
def graph_engine(tiny_qwen3, monkeypatch):
    add_graph_backend(monkeypatch)
    return engine(tiny_qwen3, decisions(decode=(1, 2, 4), prefill=(16, 32), max_requests=3,
                                        tokens_per_request=(1, 2)))


def _seqs(*lens, prefix=4, logits_rows=()):
    return [StepSeq(row=i + 1, prefix_len=prefix, extend_len=e, pages=[1, 2, 3],
                    new_tokens=[5] * e, logits_rows=logits_rows, sample=True)
            for i, e in enumerate(lens)]


def _chosen(graphs, seqs, **kwargs):
    g = graphs.find(seqs, **kwargs)
    return None if g is None else (g.phase, g.shape.num_requests, g.shape.num_tokens)


def test_each_kind_of_step_replays_the_smallest_fitting_graph_or_runs_eager(graph_engine):
    graphs = graph_engine.runner.graphs
    assert _chosen(graphs, _seqs(1)) == ("decode", 1, 1)
    assert _chosen(graphs, _seqs(1, 1, 1)) == ("decode", 4, 4), "3 decodes pad to the size-4 graph"
    assert _chosen(graphs, _seqs(2, 2, 2)) == ("decode", 4, 8), "verify shape: q = 2 per request"
    assert _chosen(graphs, _seqs(3, 3)) == ("prefill", 4, 16), "no q = 3 decode graph: varlen prefill"
    assert _chosen(graphs, _seqs(1, 9, 1)) == ("prefill", 4, 16), "a mixed step is a varlen prefill"
    assert _chosen(graphs, _seqs(12, 13, prefix=0)) == ("prefill", 4, 32)
    assert _chosen(graphs, _seqs(1, 1, 1, 1, 1)) is None, "5 decodes: over the decode ladder and " \
                                                         "over the prefill graphs' 3 requests"
    assert _chosen(graphs, _seqs(20, 13)) is None, "33 tokens: over the largest prefill graph"
    assert _chosen(graphs, _seqs(5, logits_rows=[0, 1])) is None, "prompt logprobs run eager"
    assert _chosen(graphs, _seqs(1), track_states=True) is None, "per-position states run eager"
    assert _chosen(graphs, _seqs(1), capture_hidden_layers=(2,)) is None, "hidden states run eager"


def test_without_prefill_graphs_mixed_and_prefill_steps_run_eager(tiny_qwen3, monkeypatch):
    add_graph_backend(monkeypatch)
    graphs = engine(tiny_qwen3, decisions(decode=(1, 2))).runner.graphs
    assert _chosen(graphs, _seqs(1, 1)) == ("decode", 2, 2)
    assert _chosen(graphs, _seqs(1, 7)) is None and _chosen(graphs, _seqs(7)) is None


def test_no_enabled_phase_captures_nothing(tiny_qwen3, monkeypatch):
    add_graph_backend(monkeypatch)
    eng = engine(tiny_qwen3, decisions())
    assert eng.runner.graphs is None and eng.stats().graph_replays == {"prefill": 0, "decode": 0,
                                                                       "draft": 0}


# -- require ------------------------------------------------------------------------------------


def test_require_on_cpu_is_a_startup_error_naming_the_reason(tiny_qwen3):
    with pytest.raises(PlanError, match="graphs.decode = require, but: cpu: CUDA graphs need device cuda"):
        Engine(EngineConfig(model=str(tiny_qwen3), graphs={"decode": "require"}), progress=False)


def test_require_turns_the_models_prefill_veto_into_a_startup_error(monkeypatch):
    with pytest.raises(PlanError) as err:
        _cuda_plan(monkeypatch, HYBRID_INFO, graphs={"prefill": "require"})
    assert ("graphs.prefill = require, but: model Qwen3_5ForCausalLM: 'linear_attention' layers "
            "build the chunk and conv layout of a variable-length prefill on the host") in str(err.value)


def test_under_auto_the_model_vetoes_hybrid_prefill_and_allows_hybrid_decode(monkeypatch):
    plan = _cuda_plan(monkeypatch, HYBRID_INFO)
    assert plan.graphs["decode"].enabled and plan.graphs["decode"].sizes[-1] == 64
    prefill = plan.graphs["prefill"]
    assert not prefill.enabled and prefill.sizes == ()
    assert "a prefill graph needs them computed outside the graph" in prefill.describe()


def test_verify_shaped_decode_of_a_delta_rule_model_is_vetoed_with_the_fix(monkeypatch):
    plan = _cuda_plan(monkeypatch, HYBRID_INFO, graphs={"tokens_per_request": [1, 4]})
    assert not plan.graphs["decode"].enabled
    assert "set graphs.tokens_per_request to [1]" in plan.graphs["decode"].reasons[0]
    conv_only = {**HYBRID_INFO, "architectures": ["Lfm2ForCausalLM"], "layer_types": ["conv"]}
    plan = _cuda_plan(monkeypatch, conv_only, graphs={"tokens_per_request": [1, 4]})
    assert plan.graphs["decode"].enabled, "a short conv over q uniform tokens has no host layout"


def test_a_dense_model_has_no_objection(monkeypatch):
    plan = _cuda_plan(monkeypatch, DENSE_INFO)
    assert plan.graphs["prefill"].enabled and plan.graphs["decode"].enabled


def test_a_failed_capture_is_an_error_under_require_and_a_warning_under_auto(graph_engine, caplog):
    runner = graph_engine.runner

    def fail(batch):
        raise RuntimeError("no static buffer for 4 rows")

    runner.attn.prepare_for_capture = fail
    required = {k: _with_mode(d, "require") for k, d in decisions(decode=(1, 4)).items()}
    with pytest.raises(GraphCaptureError, match="graphs.decode = require, but capturing CUDA graphs "
                                                 "failed: RuntimeError: no static buffer for 4 rows"):
        capture_graphs(required, runner, graph_type=RerunGraph)
    with caplog.at_level(logging.WARNING, logger="hinge.engine.graphs"):
        assert capture_graphs(decisions(decode=(1, 4)), runner, graph_type=RerunGraph) is None
    assert "every step runs eager" in caplog.text


def _with_mode(decision, mode):
    import dataclasses

    return dataclasses.replace(decision, mode=mode)


def test_graph_shape_phases():
    assert GraphShape.decode(4).phase == "decode" and GraphShape.decode(4, 3).phase == "verify"
    assert GraphShape.prefill(64, 8) == GraphShape(9, 64, 8, None)


def test_a_capture_that_runs_out_of_memory_says_what_to_lower(monkeypatch):
    """Out of memory during capture is an error with advice under require, not a bare OOM."""
    import torch

    from hinge.engine import graphs as g
    from hinge.plugins.plan import GraphDecision

    class Boom(g.GraphRunner):
        def __init__(self, *args, **kwargs):
            pass

        def capture(self):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(g, "GraphRunner", Boom)
    monkeypatch.setattr(g, "ladder_shapes", lambda decisions: ["shape"])
    required = {"decode": GraphDecision("decode", True, "require", ())}
    runner = type("R", (), {"model": None, "attn": None, "kv": None, "states": None,
                            "builder": None})()
    with pytest.raises(g.GraphCaptureError, match="mem_fraction_static.*graphs.prefill = off"):
        g.capture_graphs(required, runner)
    assert g.capture_graphs({"decode": GraphDecision("decode", True, "auto", ())}, runner) is None
