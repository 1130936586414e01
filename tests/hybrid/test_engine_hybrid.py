"""Hybrid models through the engine: state slots on admission, waiting, freeing, end-to-end tokens."""

from __future__ import annotations

import pytest
import torch
from hybrid_harness import VOCAB, hf_model
from hybrid_oracle import hf_greedy

from hinge import LLM, SamplingParams
from hinge.builtin.no_cache import NoCachePolicy
from hinge.contracts import CacheHit
from hinge.engine.kv_pool import KVPool
from hinge.engine.request import Request
from hinge.engine.scheduler import Scheduler
from hinge.engine.state_pool import RecurrentLayerSpec, StatePool
from hinge.testing.checkpoints import write_byte_tokenizer


@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_engine_batch_of_mixed_lengths_with_chunked_prefill_matches_transformers(hybrid_checkpoints, arch):
    path = hybrid_checkpoints(arch)
    if not (path / "tokenizer.json").exists():
        write_byte_tokenizer(path, VOCAB)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, VOCAB - 1, (n,), generator=gen).tolist() for n in (13, 3, 21, 7, 1)]
    params = SamplingParams(max_new_tokens=10, temperature=0, ignore_eos=True)
    with LLM(str(path), chunked_prefill_size=6, page_size=4, max_running_requests=3) as llm:
        outs = llm.generate(prompts, params)
        states = llm.engine.states
        info = llm.engine.server_info()["state_pool"]
        assert states is not None and states.num_used == 0, "every finished request frees its slot"
    assert info["slots"] == 3 and info["bytes"] == states.nbytes
    hf = hf_model(path)
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == hf_greedy(hf, prompt, 10), len(prompt)


def _scheduler(num_state_slots: int) -> Scheduler:
    kv = KVPool(k=[torch.zeros(64 * 4, 1, 2)], v=[torch.zeros(64 * 4, 1, 2)], page_size=4)
    layer = RecurrentLayerSpec(layer_id=0, state_id=0, conv_dim=3, conv_kernel=2, ssm_shape=(1, 2, 2))
    states = StatePool([layer], num_state_slots + 1, conv_dtype=torch.float32)
    return Scheduler(kv, NoCachePolicy(), max_running_requests=8, chunked_prefill_size=64, states=states)


def test_requests_wait_for_a_free_state_slot_and_finishing_frees_it():
    sched = _scheduler(num_state_slots=1)
    a = Request("a", [1, 2, 3], SamplingParams(max_new_tokens=4))
    b = Request("b", [4, 5], SamplingParams(max_new_tokens=4))
    sched.add(a)
    sched.add(b)
    batch = sched.schedule()
    assert [r.rid for r in batch.reqs] == ["a"] and a.state_slot == 1 and b.state_slot is None
    sched.finish(a)
    assert a.state_slot is None and sched.states.num_free == 1
    batch = sched.schedule()
    assert [r.rid for r in batch.reqs] == ["b"] and b.state_slot == 1


def test_retracted_request_gives_back_its_slot_and_readmission_plans_its_zeroing():
    sched = _scheduler(num_state_slots=2)
    a = Request("a", [1, 2, 3], SamplingParams(max_new_tokens=4))
    sched.add(a)
    sched.schedule()
    sched.states.conv[0][a.state_slot].fill_(7.0)
    sched._retract(a)
    assert a.state_slot is None and sched.states.num_used == 0
    batch = sched.schedule()
    slot = a.state_slot
    assert slot is not None and batch.state_moves.zero == [slot] and not batch.state_moves.copy
    assert sched.states.conv[0][slot].abs().sum() > 0, "the scheduler plans; it moves no state"
    sched.states.apply(batch.state_moves)  # what the runner does before the step
    assert sched.states.conv[0][slot].abs().sum() == 0


def test_a_hit_with_a_state_checkpoint_plans_a_copy_into_the_new_slot():
    class OneHit(NoCachePolicy):
        def match(self, tokens, *, salt=None):
            return CacheHit(length=4, pages=(self.page,), state_slot=3)

    sched = _scheduler(num_state_slots=4)
    cache = sched.cache = OneHit()
    cache.page = sched.allocator.allocate(1)[0]
    sched.states.allocate(zero=False)  # slots 1, 2 taken: 3 is the checkpoint, 4 gets the copy
    sched.states.allocate(zero=False)
    checkpoint = sched.states.allocate(zero=False)
    sched.states.conv[0][checkpoint].fill_(5.0)
    sched.states.ssm[0][checkpoint].fill_(6.0)
    a = Request("a", [1, 2, 3, 4, 5, 6], SamplingParams(max_new_tokens=4))
    sched.add(a)
    batch = sched.schedule()
    assert a.num_computed == 4 and batch.extend_lens == [2]
    assert batch.state_moves.copy == [(checkpoint, a.state_slot)] and not batch.state_moves.zero
    sched.states.apply(batch.state_moves)
    assert (sched.states.conv[0][a.state_slot] == 5.0).all()
    assert (sched.states.ssm[0][a.state_slot] == 6.0).all()


def test_engine_deterministic_logprobs_of_a_hybrid_do_not_depend_on_batch_or_chunking(hybrid_checkpoints):
    path = hybrid_checkpoints("Qwen3_5ForCausalLM")
    if not (path / "tokenizer.json").exists():
        write_byte_tokenizer(path, VOCAB)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(2, VOCAB - 1, (n,), generator=gen).tolist() for n in (19, 5, 11, 2, 30)]
    params = SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True, logprobs=True)
    runs = []
    for chunk, batch in ((64, prompts[:1]), (7, prompts), (3, prompts[::-1])):
        with LLM(str(path), deterministic=True, chunked_prefill_size=chunk, page_size=4) as llm:
            outs = llm.generate(batch, params)
        runs.append(next(o for o, p in zip(outs, batch, strict=True) if p == prompts[0]))
    assert runs[0].logprobs == runs[1].logprobs == runs[2].logprobs
    assert runs[0].token_ids == runs[1].token_ids == runs[2].token_ids


def test_state_pool_is_reported_at_start_up_and_a_budget_too_small_for_it_fails_clearly(
    hybrid_checkpoints, caplog
):
    path = hybrid_checkpoints("Lfm2ForCausalLM")
    if not (path / "tokenizer.json").exists():
        write_byte_tokenizer(path, VOCAB)
    with caplog.at_level("INFO", logger="hinge.engine.state_pool"):
        with LLM(str(path), max_running_requests=5) as llm:
            per_slot = StatePool.bytes_per_slot(llm.engine.model.recurrent_layers, torch.float32)
    assert per_slot == 3 * 32 * 2 * 4  # three conv layers, 32 channels, window of 2, float32
    assert any("state pool: 5 slots" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="lower max_running_requests or raise kv_cache_bytes"):
        LLM(str(path), max_running_requests=64, kv_cache_bytes=64 * per_slot)
