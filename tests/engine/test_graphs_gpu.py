"""CUDA graphs on a GPU: replay equals eager at every ladder size (bf16 tolerance; bitwise in
deterministic mode when the backend claims batch invariance) for a dense, an MoE and a hybrid
tiny model, decode, prefill and mixed steps, end to end after a retraction; replay counters move
where graphs are on. Attention: the built-in ``triton`` backend when it is registered, else the
graph-capable test backend of tests/testing/graph_backend.py."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import NAME as TEST_BACKEND
from graph_helpers import add_graph_backend, assert_same_outputs, prompts, run

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.engine.request import ScheduledBatch
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import tiny_checkpoints

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ARCHS = ["qwen3", "qwen3_moe", "qwen3_5"]
DECODE_LIVE = [1, 2, 3, 4, 7, 8]  #: ladder 1, 2, 4, 8: every size exactly and padded by one
PREFILL_TOKENS = [64, 59, 128, 100, 256, 250]  #: ladder 64, 128, 256: exact and padded


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tiny_checkpoints(tmp_path_factory.mktemp, seed=5)


def _backend(monkeypatch, claim: str = "decode_graph", dtype: str = "bfloat16",
             head_dim: int = 16) -> str:
    """The first real CUDA backend here (flashinfer, then the built-in Triton kernels) whose
    capabilities claim ``claim``, ``dtype`` and the tiny models' ``head_dim``; the test's fake
    graph backend where none does."""
    from hinge.plugins.auto_attention import PREFERENCES, import_problem
    from hinge.plugins.manager import get_plugin_manager

    pm = get_plugin_manager()
    for name, module in PREFERENCES["cuda"]:  # auto's order, without the torch reference
        if module is None or name not in pm.names("attention") or import_problem(module) is not None:
            continue
        caps = pm.get_component("attention", name).spec.capabilities
        if getattr(caps, claim) and dtype in caps.dtypes and \
                (caps.head_dims is None or head_dim in caps.head_dims):
            return name
    add_graph_backend(monkeypatch)
    return TEST_BACKEND


def _batch_invariant(name: str) -> bool:
    from hinge.plugins.manager import get_plugin_manager

    return get_plugin_manager().get_component("attention", name).spec.capabilities.batch_invariant


def _engine(path, backend, **options) -> Engine:
    options = {"device": "cuda", "attention": backend, "max_running_requests": 8,
               "chunked_prefill_size": 256, **options}
    eng = Engine(EngineConfig(model=str(path), **options), progress=False)
    eng.overlap = False  # these tests drive single steps by hand
    return eng


@torch.inference_mode()  # as Engine.step runs; the runner's buffers are inference tensors
def _both_ways(eng: Engine, sched: ScheduledBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's sampling logits from its graph replay, then eager; pool states restored."""
    runner, states = eng.runner, eng.states
    saved = None if states is None else [None if t is None else t.clone() for t in (*states.conv, *states.ssm)]

    def restore():
        if saved is not None:
            for t, s in zip((*states.conv, *states.ssm), saved, strict=True):
                if t is not None:
                    t.copy_(s)

    before = sum(runner.graph_replays.values())
    got = runner.forward(sched).sample_logits.clone()
    assert sum(runner.graph_replays.values()) == before + 1, "the step must replay a graph"
    restore()
    graphs, runner.graphs = runner.graphs, None
    try:
        want = runner.forward(sched).sample_logits.clone()
    finally:
        runner.graphs = graphs
    restore()
    return got, want


def _compare(got, want, exact: bool, what: str) -> None:
    if exact:
        assert torch.equal(got, want), f"{what}: replay differs from eager in deterministic mode"
        return
    lp_got, lp_want = torch.log_softmax(got.float(), -1), torch.log_softmax(want.float(), -1)
    assert torch.isfinite(lp_got).all(), f"{what}: replay produced non-finite logits"
    torch.testing.assert_close(lp_got, lp_want, atol=0.1, rtol=0.05, msg=lambda m: f"{what}: {m}")


def _decoding(eng: Engine, n: int) -> ScheduledBatch:
    """``n`` requests past their prefill; the scheduler's next decode step over all of them."""
    params = SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
    for p in prompts([3 + 7 * i for i in range(n)], seed=n):
        eng.add_request(p, params)
    while not (len(eng.scheduler.running) == n
               and all(r.num_output >= 1 for r in eng.scheduler.running)):
        eng.step()
    sched = eng.scheduler.schedule()
    assert sched is not None and sched.phase == "decode" and len(sched.reqs) == n
    return sched


@pytest.mark.parametrize("deterministic", [False, True], ids=["bf16", "deterministic"])
@pytest.mark.parametrize("arch", ARCHS)
def test_decode_replay_equals_eager_at_every_ladder_size(checkpoints, monkeypatch, arch, deterministic):
    backend = _backend(monkeypatch, "batch_invariant" if deterministic else "decode_graph")
    if deterministic and not _batch_invariant(backend):
        pytest.skip(f"attention {backend!r} does not claim batch invariance")
    eng = _engine(checkpoints(arch), backend, deterministic=deterministic)
    assert eng.plan.graphs["decode"].sizes == (1, 2, 4, 8)
    full = _decoding(eng, max(DECODE_LIVE))
    for n in DECODE_LIVE:
        sched = ScheduledBatch("decode", full.reqs[:n], [1] * n)
        got, want = _both_ways(eng, sched)
        _compare(got, want, deterministic, f"{arch} decode, {n} live")
    eng.close()


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_prefill_and_mixed_replay_equals_eager_at_every_ladder_size(checkpoints, monkeypatch, arch):
    backend = _backend(monkeypatch, "prefill_graph")
    eng = _engine(checkpoints(arch), backend)
    assert eng.plan.graphs["prefill"].sizes == (64, 128, 256)
    params = SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True)
    for i, t in enumerate(PREFILL_TOKENS):
        rid = eng.add_request(prompts([t], seed=i)[0], params)
        sched = eng.scheduler.schedule()
        assert sched.phase == "prefill" and sched.num_tokens == t
        got, want = _both_ways(eng, sched)
        _compare(got, want, False, f"{arch} prefill of {t} tokens")
        eng.abort_request(rid)
        eng.step()
    decoding = _decoding(eng, 3)
    assert decoding.phase == "decode"
    eng.add_request(prompts([90], seed=7)[0], params)
    mixed = eng.scheduler.schedule()
    assert mixed.phase == "mixed", "three decodes and a new prompt in one step"
    got, want = _both_ways(eng, mixed)
    _compare(got, want, False, f"{arch} mixed step")
    eng.close()


def test_hybrid_prefill_runs_eager_because_the_model_vetoes_it(checkpoints, monkeypatch):
    eng = _engine(checkpoints("qwen3_5"), _backend(monkeypatch))
    assert not eng.plan.graphs["prefill"].enabled and eng.plan.graphs["decode"].enabled
    run(eng, prompts([30, 12]), SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True))
    stats = eng.stats()
    assert stats.graph_replays["prefill"] == 0 and stats.eager_steps.get("prefill", 0) > 0
    assert stats.graph_replays["decode"] > 0
    eng.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_generation_with_graphs_equals_eager_after_a_retraction(checkpoints, monkeypatch, arch):
    """float32 end to end (no bf16 near-ties): same tokens and logprobs with graphs on and off,
    through prefill, mixed and decode steps, overlap scheduling and a retraction (a pool of 40
    pages for six requests that need about 60)."""
    from hinge.engine.kv_pool import kv_bytes_per_token

    backend = _backend(monkeypatch, "decode_graph" if arch == "qwen3_5" else "prefill_graph",
                       dtype="float32")
    params = [SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True, logprobs=True),
              SamplingParams(max_new_tokens=20, temperature=0.8, seed=3, ignore_eos=True)] * 3
    lens = [20, 22, 24, 26, 9, 40]
    # cache "none": the pool arithmetic below counts KV pages and running state slots only
    roomy = _engine(checkpoints(arch), backend, graphs="off", dtype="float32", page_size=4,
                    cache="none")
    per_page = 4 * kv_bytes_per_token(roomy.model.attention_layers, torch.float32)
    states = 0 if roomy.states is None else roomy.states.nbytes
    want = run(roomy, prompts(lens), params)
    roomy.close()
    eng = _engine(checkpoints(arch), backend, dtype="float32", page_size=4, cache="none",
                  kv_cache_bytes=states + 41 * per_page)
    eng.overlap = True
    got = run(eng, prompts(lens), params)
    assert eng.scheduler.num_retractions > 0, "the test must retract to mean anything"
    assert_same_outputs(got, want, atol=2e-3)
    replays = eng.stats().graph_replays
    assert replays["decode"] > 0, f"decode graphs replayed: {replays}"
    if arch != "qwen3_5":
        assert replays["prefill"] > 0, f"prefill graphs replayed: {replays}"
    eng.close()
