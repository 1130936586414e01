"""Invariant 1, the one checkpoint path, at the layer level: a checkpoint inside a step (the split
run) keeps exactly the state a run of that prefix ends with, and changes nothing else the step
computes; a checkpoint at the step's end is the step's own state write aimed at the checkpoint
slot; every write stamps its slot, and the receipt reads the stamps back."""

from __future__ import annotations

import pytest
import torch
from hybrid_harness import VOCAB, load_hinge

from hinge.batching import ForwardBatchBuilder, StepSeq
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.engine.kv_pool import KVPool
from hinge.engine.state_pool import StatePool
from hinge.forward import ForwardContext

PAGE = 4
OWN, CHECKPOINT, OTHER = 1, 3, 4  # state slots: a request's own, a checkpoint slot, an untouched one


class Pools:
    """A KV pool, a state pool with a checkpoint region, a builder: one request, step by step."""

    def __init__(self, model, deterministic: bool):
        from types import SimpleNamespace

        layers = model.attention_layers
        per_page = sum(2 * a.num_kv_heads * a.head_dim * 4 for a in layers) * PAGE
        self.model = model
        self.kv = KVPool.create(layers, budget_bytes=per_page * 64, page_size=PAGE,
                                dtype=model.dtype, device="cpu")
        self.states = StatePool(model.recurrent_layers, 3, conv_dtype=model.dtype,
                                num_checkpoint_slots=2)
        self.attn = TorchAttentionBackend(build=SimpleNamespace(page_size=PAGE,
                                                                 deterministic=deterministic))
        self.builder = ForwardBatchBuilder(page_size=PAGE, max_rows=4, max_pages=64, device="cpu")
        self.pages: list[int] = []
        self.done = 0

    def step(self, tokens: list[int], *, stamp: int, write_slot: int = OWN, checkpoint_len: int = 0,
             checkpoint_slot: int = 0) -> torch.Tensor:
        need = self.kv.pages_needed(self.done + len(tokens)) - len(self.pages)
        self.pages += self.kv.allocator.allocate(need)
        seq = StepSeq(row=1, prefix_len=self.done, extend_len=len(tokens), pages=self.pages,
                      new_tokens=tokens, state_slot=OWN if self.done or write_slot == OWN else OWN,
                      state_write_slot=write_slot, checkpoint_len=checkpoint_len,
                      checkpoint_slot=checkpoint_slot, logits_rows=range(len(tokens)))
        batch = self.builder.build([seq], stamp=stamp)
        batch.attn_metadata = self.attn.prepare_metadata(batch)
        with torch.inference_mode():
            out = self.model.forward(ForwardContext(batch=batch, attn=self.attn, kv=self.kv,
                                                    states=self.states))
        self.done += len(tokens)
        return out.logits

    def state(self, slot: int) -> list[torch.Tensor]:
        out = [c[slot].clone() for c in self.states.conv]
        return out + [s[slot].clone() for s in self.states.ssm if s is not None]


def _same(a: list[torch.Tensor], b: list[torch.Tensor], exact: bool) -> None:
    for x, y in zip(a, b, strict=True):
        if exact:
            assert torch.equal(x, y), f"differs by {(x - y).abs().max():.3g}"
        else:
            torch.testing.assert_close(x, y, atol=2e-5, rtol=1e-5)


PROMPT = torch.randint(2, VOCAB - 1, (23,), generator=torch.Generator().manual_seed(5)).tolist()


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_a_checkpoint_inside_a_step_is_the_state_of_its_prefix_and_changes_nothing_else(
        hybrid_checkpoints, arch, deterministic):
    model = load_hinge(hybrid_checkpoints(arch), deterministic=deterministic)
    split = Pools(model, deterministic)
    logits = split.step(PROMPT, stamp=7, checkpoint_len=12, checkpoint_slot=CHECKPOINT)
    whole = Pools(model, deterministic)
    first = whole.step(PROMPT[:12], stamp=1)
    at_12 = whole.state(OWN)
    rest = whole.step(PROMPT[12:], stamp=2)
    plain = Pools(model, deterministic)
    unsplit = plain.step(PROMPT, stamp=1)
    # the checkpoint is the state after 12 tokens; the step's final state and rows are unchanged
    _same(split.state(CHECKPOINT), at_12, exact=deterministic)
    _same(split.state(OWN), whole.state(OWN), exact=deterministic)
    _same([logits], [torch.cat([first, rest])], exact=deterministic)
    _same([logits], [unsplit], exact=deterministic)
    _same(split.state(OTHER), [torch.zeros_like(t) for t in split.state(OTHER)], exact=True)
    assert (split.states.stamps[:, [OWN, CHECKPOINT]] == 7).all(), "every layer stamps what it wrote"
    assert (split.states.stamps[:, OTHER] == 0).all()


@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_a_checkpoint_at_the_steps_end_is_its_state_write_into_the_checkpoint_slot(hybrid_checkpoints, arch):
    model = load_hinge(hybrid_checkpoints(arch), deterministic=True)
    pools = Pools(model, True)
    pools.step(PROMPT[:8], stamp=1)
    before = pools.state(OWN)
    pools.step(PROMPT[8:16], stamp=2, write_slot=CHECKPOINT)
    reference = Pools(model, True)
    reference.step(PROMPT[:16], stamp=1)
    _same(pools.state(CHECKPOINT), reference.state(OWN), exact=True)
    _same(pools.state(OWN), before, exact=True)  # the slot read is not written
    assert pools.states.receipt([CHECKPOINT, OTHER], 2).written() == [True, False]
    assert pools.states.receipt([CHECKPOINT], 3).written() == [False], "an older stamp is no receipt"


def test_a_receipt_needs_every_recurrent_layer_to_have_written_the_slot(hybrid_checkpoints):
    model = load_hinge(hybrid_checkpoints("Qwen3_5ForCausalLM"), deterministic=True)
    pools = Pools(model, True)
    pools.step(PROMPT[:8], stamp=4, write_slot=CHECKPOINT)
    assert pools.states.receipt([CHECKPOINT], 4).written() == [True]
    pools.states.stamps[1, CHECKPOINT] = 3  # one layer's write did not happen
    assert pools.states.receipt([CHECKPOINT], 4).written() == [False]
