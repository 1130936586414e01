"""Attention per phase in the engine: prefill and mixed steps run ``attention_prefill``, decode
steps ``attention_decode``, eager and under graphs (each graph captures its phase's backend; a
step never replays the other phase's graph). CPU: the torch reference and the graph-capable test
backend ``static_gather``; graphs are captured as reruns."""

from __future__ import annotations

import pytest
from graph_helpers import NAME, add_graph_backend, decisions, engine, prompts, run

from hinge.sampling_params import SamplingParams

PARAMS = SamplingParams(max_new_tokens=6, temperature=0.0, logprobs=True)


def record_phases(eng) -> dict[str, list[str]]:
    """Batch phases each backend prepared metadata for (eager) or refilled before a replay."""
    seen: dict[str, list[str]] = {}
    for attn, name in ((eng.attn, "prefill_backend"), (eng.attn_decode, "decode_backend")):
        for method in ("prepare_metadata", "prepare_for_replay"):
            real = getattr(attn, method)

            def wrapped(batch, *args, _real=real, _name=name):
                seen.setdefault(_name, []).append(batch.phase)
                return _real(batch, *args)

            setattr(attn, method, wrapped)
    return seen


@pytest.fixture(autouse=True)
def graph_backend(monkeypatch):
    add_graph_backend(monkeypatch)


@pytest.fixture(scope="module")
def reference(tiny_qwen3):
    """Every phase on the torch reference."""
    eng = engine(tiny_qwen3, attention="torch", device="cpu", cache="none")
    try:
        return run(eng, prompts([5, 23, 40]), PARAMS)
    finally:
        eng.close()


def test_decode_steps_run_the_decode_backend_and_the_rest_the_prefill_one(tiny_qwen3, reference):
    eng = engine(tiny_qwen3, attention_prefill="torch", attention_decode=NAME, device="cpu",
                 cache="none", chunked_prefill_size=32)
    assert type(eng.attn).__name__ == "TorchAttentionBackend"
    assert eng.attn_decode is not eng.attn and eng.runner.attn_decode is eng.attn_decode
    seen = record_phases(eng)
    got = run(eng, prompts([5, 23, 40]), PARAMS)
    assert set(seen["decode_backend"]) == {"decode"}
    assert set(seen["prefill_backend"]) <= {"prefill", "mixed"} and "mixed" in seen["prefill_backend"], (
        "a 32-token budget makes the 40-token prompt's second chunk share a step with decodes")
    for (tokens, lps, _), (w_tokens, w_lps, _) in zip(got, reference, strict=True):
        assert tokens == w_tokens
        assert max(abs(a - b) for a, b in zip(lps, w_lps, strict=True)) <= 1e-4
    eng.close()


def test_decode_graphs_capture_the_decode_backend(tiny_qwen3, reference):
    eng = engine(tiny_qwen3, graphs=decisions(decode=(1, 2, 4)), attention_prefill="torch",
                 attention_decode=NAME, device="cpu", cache="none")
    assert all(eng.runner.graphs.attn_of(g.shape) is eng.attn_decode for g in eng.runner.graphs.graphs)
    seen = record_phases(eng)
    got = run(eng, prompts([5, 23, 40]), PARAMS)
    assert eng.runner.graph_replays["decode"] > 0 and set(seen["decode_backend"]) == {"decode"}
    assert [g[0] for g in got] == [w[0] for w in reference]
    eng.close()


def test_a_decode_step_never_replays_the_prefill_backends_graph(tiny_qwen3, reference):
    """Prefill graphs capture ``static_gather`` (the prefill backend here); decode steps, which
    would fit those shapes, run eager on the torch decode backend instead."""
    eng = engine(tiny_qwen3, graphs=decisions(prefill=(128,)), attention_prefill=NAME,
                 attention_decode="torch", device="cpu", cache="none")
    seen = record_phases(eng)
    got = run(eng, prompts([5, 23, 40]), PARAMS)
    assert eng.runner.graph_replays["prefill"] > 0
    assert eng.runner.eager_steps.get("decode", 0) > 0 and set(seen["decode_backend"]) == {"decode"}
    assert [g[0] for g in got] == [w[0] for w in reference]
    eng.close()


def test_one_backend_for_both_phases_is_one_object(tiny_qwen3):
    eng = engine(tiny_qwen3, attention="torch", attention_decode="torch", device="cpu", cache="none")
    assert eng.attn_decode is eng.attn and eng.plan.attention_decode is None
    eng.close()
