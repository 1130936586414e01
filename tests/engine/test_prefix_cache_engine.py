"""The engine's side of the prefix cache: invariant 2 (cache what the client received: overshoot
past the returned tokens trimmed before insert, checkpoints past them freed, an abort with a token
in flight inserts no token the client never got), salts, and what ``Engine.stats()`` reports."""

from __future__ import annotations

import torch

from hinge.builtin.no_cache import NoCachePolicy
from hinge.config import EngineConfig
from hinge.contracts import CacheContext
from hinge.engine.engine import Engine
from hinge.engine.kv_pool import KVPool
from hinge.engine.request import Request
from hinge.engine.scheduler import Scheduler
from hinge.engine.state_pool import RecurrentLayerSpec, StatePool
from hinge.plugins import CacheCapabilities
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer

PAGE = 4


class Recording(NoCachePolicy):
    """Keeps nothing; records every insert (tokens, checkpoint positions, salt)."""

    capabilities = CacheCapabilities(prefix_sharing=True, recurrent_state=True)

    def __init__(self):
        self.inserts: list[tuple[list[int], dict[int, int], str | None]] = []

    def insert(self, tokens, pages, checkpoints=None, *, salt=None):
        self.inserts.append((list(tokens), dict(checkpoints or {}), salt))
        return super().insert(tokens, pages, checkpoints, salt=salt)


def _hybrid_scheduler():
    layer = RecurrentLayerSpec(layer_id=0, state_id=0, conv_dim=2, conv_kernel=3)
    states = StatePool.create([layer], max_requests=4, conv_dtype=torch.float32, num_checkpoint_slots=6)
    from hinge.contracts import AttentionLayer

    kv = KVPool.create([AttentionLayer(0, 1, 1, 2, 1.0)], budget_bytes=2 * 2 * 4 * PAGE * 64,
                       page_size=PAGE, dtype=torch.float32, device="cpu")
    cache = Recording()
    cache.attach(CacheContext(page_size=PAGE, pages=kv.allocator, track_interval=8,
                              checkpoint_slots=states.checkpoints))
    return Scheduler(kv, cache, max_running_requests=4, chunked_prefill_size=64, states=states), cache


def test_overshoot_past_the_returned_tokens_is_trimmed_before_insert_with_its_checkpoints():
    """As a speculator's verify may commit past max_new_tokens or a stop: KV computed for 34
    tokens, the client received 30; the insert gets those 30 and only checkpoints at or before
    them (the one past them, and one never confirmed, are freed)."""
    sched, cache = _hybrid_scheduler()
    req = Request("r", list(range(1, 21)), SamplingParams(max_new_tokens=10))
    sched.add(req)
    batch = sched.schedule()
    assert batch.reqs == [req] and req.state_slot is not None
    req.output_ids = list(range(100, 110))  # what the client received: 20 + 10 tokens
    req.num_computed = 34
    sched._reserve(req, 34)
    slots = sched.states.checkpoints
    branch, past, unconfirmed = slots.allocate(), slots.allocate(), slots.allocate()
    from hinge.engine.request import PlannedCheckpoint

    req.kept_checkpoints = {16: branch}
    req.checkpoint = (32, past)
    req.pending_checkpoints = [PlannedCheckpoint(28, unconfirmed)]
    sched.finish(req)
    tokens, checkpoints, _ = cache.inserts[-1]
    assert tokens == req.prompt_ids + req.output_ids, "the insert must be what the client received"
    assert checkpoints == {16: branch}, "only a confirmed checkpoint at or before 30 is offered"
    assert slots.num_used == 0 and sched.states.num_used == 0, "every slot comes back"
    assert sched.allocator.num_used == 0


def _engine(path, **kw) -> Engine:
    return Engine(EngineConfig(model=str(path), page_size=PAGE, track_interval=8, **kw), progress=False)


def _hybrid(tmp_path):
    path = make_tiny_checkpoint("qwen3_5", tmp_path, seed=2)
    write_byte_tokenizer(path)
    return path


def test_an_abort_with_a_token_in_flight_inserts_only_tokens_the_client_received(tmp_path):
    eng = _engine(_hybrid(tmp_path))
    eng.overlap = True
    inserts = []
    real = eng.cache.insert

    def spy(tokens, pages, checkpoints=None, *, salt=None):
        inserts.append((len(tokens), sorted(checkpoints or {})))
        return real(tokens, pages, checkpoints, salt=salt)

    eng.cache.insert = spy
    rid = eng.add_request(list(range(40, 70)), SamplingParams(max_new_tokens=50, temperature=0,
                                                               ignore_eos=True))
    received = []
    while True:
        for out in eng.step():
            received += out.new_token_ids
        req = eng.scheduler.find(rid)
        if req.num_pending and req.num_output >= 5:
            break
    assert req.num_pending == 1, "a token is in flight: sampled, not yet known on the host"
    eng.abort_request(rid)
    while eng.has_unfinished():
        eng.step()
    length, positions = inserts[-1]
    assert length == 30 + len(received) == req.num_prompt + req.num_output == req.num_computed
    assert all(p <= length for p in positions)
    assert eng.stats().kv_pages_used == 0 and eng.states.checkpoints.num_used == len(positions)


def test_requests_with_different_salts_never_share_through_the_engine(tmp_path):
    eng = _engine(_hybrid(tmp_path))
    prompt = list(range(50, 95))

    def cached(salt):
        params = SamplingParams(max_new_tokens=3, temperature=0, ignore_eos=True)
        params.cache_salt = salt  # NOTE: the field the API layer sets (sglang extra_key, vLLM cache_salt)
        rid = eng.add_request(prompt, params)
        while eng.has_unfinished():
            for out in eng.step():
                if out.rid == rid and out.finished:
                    result = out.cached_tokens
        return result

    assert cached("a") == 0
    assert cached("b") == 0, "another salt hit the first one's prefix"
    assert cached("a") == 40 and cached(None) == 0


def test_stats_report_hits_tree_size_checkpoint_slots_and_writes(tmp_path):
    eng = _engine(_hybrid(tmp_path), checkpoint_slots=5)
    params = SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True)
    prompt = list(range(10, 47))
    for _ in range(2):  # turn 2 = turn 1 + its 12 tokens + 3: hits the checkpoint at 48
        eng.add_request(prompt, params)
        while eng.has_unfinished():
            for out in eng.step():
                if out.finished:
                    prompt = prompt + out.token_ids + [1, 2, 3]
    stats = eng.stats()
    cache = stats.prefix_cache
    assert (cache["query_tokens"], cache["hit_tokens"]) == (37 + 52, 48)
    assert stats.cached_tokens == 48
    assert cache["tree_tokens"] == stats.kv_pages_cached * PAGE > 0
    assert stats.kv_pages_used == 0, "pages only the cache holds count as free"
    assert cache["checkpoint_slots_total"] == 5 and cache["checkpoint_slots_used"] == cache["tree_checkpoints"] > 0
    writes = cache["checkpoint_writes"]["eager"]
    assert writes["prefill"] > 0 and writes["decode"] > 0
    assert eng.server_info()["stats"]["prefix_cache"] == cache
    assert eng.flush_cache()
    after = eng.stats()
    assert after.prefix_cache["tree_tokens"] == 0 and after.prefix_cache["checkpoint_slots_used"] == 0
    assert eng.kv.allocator.num_used == 0


def test_checkpoint_budget_is_counted_in_the_state_pool_and_the_default_is_small_on_cpu(tmp_path):
    path = _hybrid(tmp_path)
    eng = _engine(path, max_running_requests=4)
    assert eng.states.num_checkpoint_slots == 8, "default: 2 per running request (10% cap not hit)"
    per_slot = StatePool.bytes_per_slot(eng.model.recurrent_layers, eng.dtype)
    assert eng.states.nbytes == (4 + 1 + 8) * per_slot
    none = _engine(path, max_running_requests=4, cache="none")
    assert none.states.num_checkpoint_slots == 0, "a cache without recurrent state gets no budget"


def test_the_default_cache_is_radix_and_without_its_plugin_the_error_names_it_and_cache_none(tmp_path):
    import pytest

    from hinge.config import load_config
    from hinge.plugins.plan import PlanError, resolve_plan

    assert load_config(env={}).cache == "radix"
    assert resolve_plan(load_config(env={}, overrides={"device": "cpu"}), model_info={}).cache.plugin == "radix"
    config = load_config(env={"HINGE_PLUGINS": ""}, overrides={"device": "cpu"})
    with pytest.raises(PlanError, match=r"(?s)unknown cache policy 'radix'.*plugin 'radix'.*cache=\"none\""):
        resolve_plan(config, model_info={})
    none = load_config(env={"HINGE_PLUGINS": ""}, overrides={"device": "cpu", "cache": "none"})
    assert resolve_plan(none, model_info={}).cache.name == "none"
