"""The graph runner inside the engine, on CPU: every step that fits a captured shape goes through
the static tensors, the padding and the backend's prepare_for_replay, and "replay" reruns the
captured step over them (hinge.engine.graphs.RerunGraph). Outputs must equal the same engine
without graphs, and the counters must show which path each step took."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import add_graph_backend, assert_same_outputs, decisions, engine, prompts, run

from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import tiny_checkpoints

LADDERS = decisions(decode=(1, 2, 4), prefill=(16, 32), max_requests=4)
OPTIONS = dict(max_running_requests=6, chunked_prefill_size=24)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tiny_checkpoints(tmp_path_factory.mktemp, seed=5)


def _params():
    return [
        SamplingParams(max_new_tokens=9, temperature=0, ignore_eos=True, logprobs=True),
        SamplingParams(max_new_tokens=12, temperature=0.8, top_p=0.9, seed=3, ignore_eos=True),
        SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True, prompt_logprobs_start=0),
        SamplingParams(max_new_tokens=14, temperature=0, repetition_penalty=1.2, ignore_eos=True),
        SamplingParams(max_new_tokens=5, temperature=1.0, top_k=5, seed=9, ignore_eos=True),
        SamplingParams(max_new_tokens=11, temperature=0, ignore_eos=True, logprobs=True),
    ]


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
@pytest.mark.parametrize("overlap", [False, True], ids=["collect", "overlap"])
def test_replays_equal_eager_for_mixed_prefill_and_decode(checkpoints, monkeypatch, arch, overlap):
    add_graph_backend(monkeypatch)
    path = checkpoints(arch)
    lens = [5, 30, 11, 3, 17, 40]
    eager_engine = engine(path, **OPTIONS)
    eager_engine.overlap = overlap
    want = run(eager_engine, prompts(lens), _params())
    eng = engine(path, LADDERS, **OPTIONS)
    eng.overlap = overlap
    got = run(eng, prompts(lens), _params())
    assert_same_outputs(got, want)
    stats = eng.stats()
    replays, eager = stats.graph_replays, stats.eager_steps
    assert replays["decode"] > 0 and replays["prefill"] > 0, f"both phases replayed: {replays}"
    assert sum(eager.values()) > 0, "steps over the ladders (6 decodes, prompt logprobs) run eager"
    assert replays["decode"] + replays["prefill"] + sum(eager.values()) == stats.forward_steps
    assert eager_engine.stats().graph_replays == {"prefill": 0, "decode": 0, "draft": 0}


def test_replays_after_a_retraction_give_the_tokens_of_a_roomy_pool(checkpoints, monkeypatch):
    add_graph_backend(monkeypatch)
    path = checkpoints("qwen3")
    params = SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True)
    roomy = run(engine(path), prompts([20, 22, 24, 26]), params)
    tight = engine(path, LADDERS, page_size=4, kv_cache_bytes=40 * 4 * 2 * 2 * 16 * 4)
    got = run(tight, prompts([20, 22, 24, 26]), params)
    assert tight.scheduler.num_retractions > 0, "the test must retract to mean anything"
    assert [g[0] for g in got] == [r[0] for r in roomy]
    assert tight.stats().graph_replays["decode"] > 0


def test_hybrid_decode_replays_equal_eager(checkpoints, monkeypatch):
    """The model vetoes hybrid prefill graphs; decode graphs carry the recurrent state (slot 0 for
    padded rows)."""
    add_graph_backend(monkeypatch)
    path = checkpoints("qwen3_5")
    params = SamplingParams(max_new_tokens=10, temperature=0, ignore_eos=True, logprobs=True)
    want = run(engine(path, chunked_prefill_size=8), prompts([7, 19, 4]), params)
    eng = engine(path, decisions(decode=(1, 2, 4)), chunked_prefill_size=8)
    got = run(eng, prompts([7, 19, 4]), params)
    assert_same_outputs(got, want)
    assert eng.stats().graph_replays["decode"] > 0


def test_padded_hybrid_rows_touch_only_state_slot_0(checkpoints, monkeypatch):
    """Three live decodes in the size-4 graph: the padded row writes state slot 0, never a slot a
    request holds or a free one."""
    add_graph_backend(monkeypatch)
    eng = engine(checkpoints("qwen3_5"), decisions(decode=(4,)))
    params = SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True)
    for p in prompts([6, 9, 5]):
        eng.add_request(p, params)
    while eng.stats().graph_replays["decode"] == 0:
        eng.step()
    live = {r.state_slot for r in eng.scheduler.running}
    assert len(live) == 3
    pool = eng.states
    untouched = [s for s in range(1, pool.num_slots) if s not in live]
    for t in (*pool.conv, *pool.ssm):
        if t is not None:
            t[untouched] = 3.0
    before = [t[untouched].clone() for t in (*pool.conv, *pool.ssm) if t is not None]
    eng.step()
    assert eng.stats().graph_replays["decode"] == 2
    after = [t[untouched] for t in (*pool.conv, *pool.ssm) if t is not None]
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_replay_counters_reach_metrics_and_server_info(checkpoints, monkeypatch):
    add_graph_backend(monkeypatch)
    eng = engine(checkpoints("qwen3"), LADDERS)
    run(eng, prompts([5, 9]), SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True))
    replays = eng.stats().graph_replays
    assert eng.server_info()["stats"]["graph_replays"] == replays and replays["decode"] > 0
    from hinge.server.server_metrics import ServerMetrics

    text = ServerMetrics().render(eng.stats().to_dict(), wedged=False)
    assert f'hinge:cuda_graph_replays_total{{phase="decode"}} {replays["decode"]}' in text
