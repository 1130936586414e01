"""The in-place decode kernel (``decode_in_pool``) on CPU under Triton's interpreter: each request
starts from its read slot (zeros when fresh), its new state lands in its write slot, nothing
else in the pool changes, and a tiny Qwen3.5 decoding through it matches the torch reference
kernels. Bits against the token-recurrence kernel and speed are GPU checks
(test_decode_in_pool_gpu.py)."""

from __future__ import annotations

import pytest
import torch
from hybrid_harness import InterpretedInPool, StepHarness, interpreted_kernel, load_hinge

from hinge.layers.recurrent_kernels import TorchRecurrentKernels
from hinge.testing.reference import reference_gated_delta_rule
from hinge.testing.triton_interpreter import patch_interpreter

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def interpreted():
    """Private copies of the two kernel modules with their kernels interpreted."""
    return interpreted_kernel("decode_in_pool"), interpreted_kernel("delta_rule_triton")


@pytest.fixture
def interpreter(monkeypatch, interpreted):
    patch_interpreter(monkeypatch)
    return interpreted


def _decode_inputs(b, hk=2, hv=4, dk=8, dv=6, slots=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    xs = (torch.randn(b, hk, dk, generator=gen), torch.randn(b, hk, dk, generator=gen),
          torch.randn(b, hv, dv, generator=gen), torch.nn.functional.logsigmoid(torch.randn(b, hv, generator=gen) + 2),
          torch.rand(b, hv, generator=gen))
    return xs, torch.randn(slots, hv, dk, dv, generator=gen) * 0.3


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16])
def test_each_request_reads_its_slot_and_writes_its_new_state_to_its_write_slot_only(interpreter, pool_dtype):
    xs, pool = _decode_inputs(3)
    pool = pool.to(pool_dtype)
    before = pool.clone()
    read, write = torch.tensor([3, 5, 1]), torch.tensor([3, 6, 2])  # in place; elsewhere; elsewhere
    prefix = torch.tensor([7, 0, 2])  # request 1 is fresh: it starts from zeros, not from slot 5
    out = interpreter[0].decode_in_pool(*xs, pool, read, write, prefix)
    tol = 1e-5 if pool_dtype == torch.float32 else 1e-2
    for i in range(3):
        s0 = before[read[i]].double() if prefix[i] else torch.zeros_like(before[0], dtype=torch.float64)
        o64, s64, _ = reference_gated_delta_rule(*(x[i : i + 1] for x in xs), s0)
        torch.testing.assert_close(out[i].double(), o64[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(pool[write[i]].double(), s64, rtol=tol, atol=tol)
    untouched = [s for s in range(pool.shape[0]) if s not in write.tolist()]
    assert torch.equal(pool[untouched], before[untouched]), "only the write slots change"


def test_decode_rows_are_the_bits_of_the_token_recurrence_kernel_from_the_gathered_states(interpreter):
    in_pool, recurrence = interpreter
    xs, pool = _decode_inputs(5, seed=1)
    read, write, prefix = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([6, 7, 3, 0, 5]), torch.ones(5, dtype=torch.int64)
    out, final, _ = recurrence.gated_delta_rule(*xs, pool[read], list(range(6)))
    got = in_pool.decode_in_pool(*xs, pool, read, write, prefix)
    assert torch.equal(got, out) and torch.equal(pool[write], final)


def test_every_kernel_inlining_the_token_loop_specializes_on_the_same_input_alignment():
    """The interpreter does not model it: on the H200 (2026-12-02) decode_in_pool's kernel,
    specialized on 16-byte aligned inputs where the token-recurrence kernel is not, laid its
    loads out otherwise and gave deterministic decode rows other bits than prefill rows."""
    from triton.runtime.jit import JITFunction

    from hinge.layers.recurrent_kernels import decode_in_pool, delta_rule_triton

    kernels = {value.__name__: value for module in (decode_in_pool, delta_rule_triton)
               for value in vars(module).values()
               if isinstance(value, JITFunction) and value.__name__ != "walk_tokens"
               and "walk_tokens(" in value.src}
    assert sorted(kernels) == ["_decode_in_pool_kernel", "_delta_rule_kernel"]
    for name, kernel in kernels.items():
        unaligned = [kernel.arg_names[i] if isinstance(i, int) else i
                     for i in kernel.do_not_specialize_on_alignment]
        assert tuple(unaligned) == delta_rule_triton.UNALIGNED_TOKEN_INPUTS, name


@pytest.mark.parametrize("tile", [(2, 1), (4, 2), (8, 4), (32, 1)])
def test_another_tiling_decodes_the_same_states_to_rounding(interpreter, tile):
    """``tile`` (default mode's ``DEFAULT_MODE_TILE`` = (32, 1) and the sweep's others; value
    columns 6 = ragged for 4, 8 and 32): the float64 recurrence's outputs and new states, as the
    deterministic tiling gives them."""
    xs, pool = _decode_inputs(3, seed=4)
    before = pool.clone()
    read, write, prefix = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), torch.tensor([3, 0, 1])
    out = interpreter[0].decode_in_pool(*xs, pool, read, write, prefix, tile=tile)
    for i in range(3):
        s0 = before[read[i]].double() if prefix[i] else torch.zeros_like(before[0], dtype=torch.float64)
        o64, s64, _ = reference_gated_delta_rule(*(x[i : i + 1] for x in xs), s0)
        torch.testing.assert_close(out[i].double(), o64[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(pool[write[i]].double(), s64, rtol=1e-5, atol=1e-5)


def test_an_empty_step_returns_no_rows_and_leaves_the_pool(interpreter):
    xs, pool = _decode_inputs(0)
    before = pool.clone()
    empty = torch.zeros(0, dtype=torch.int64)
    assert interpreter[0].decode_in_pool(*xs, pool, empty, empty, empty).shape == (0, 4, 6)
    assert torch.equal(pool, before)


def test_a_pool_of_other_head_sizes_is_refused_with_its_shape(interpreter):
    xs, pool = _decode_inputs(2)
    with pytest.raises(ValueError, match=r"\(slots, 4, 8, 6\)"):
        interpreter[0].decode_in_pool(*xs, pool[:, :2], torch.tensor([1, 2]), torch.tensor([1, 2]), torch.tensor([1, 1]))


def test_a_tiny_qwen3_5_decoding_in_the_pool_matches_the_reference_kernels(interpreter, hybrid_checkpoints):
    path = hybrid_checkpoints("Qwen3_5ForCausalLM")
    runs = {}
    for name, kernels in (("reference", TorchRecurrentKernels()), ("in pool", InterpretedInPool(rule=interpreter[0]))):
        model = load_hinge(path)
        model.set_recurrent_kernels(kernels)
        h = StepHarness(model, max_requests=4)
        h.step([("a", [5, 6, 7, 8]), ("b", [9, 10]), ("c", [11])])  # prefill: the gather path
        logits = [h.step([("a", [12 + i]), ("b", [20 + i]), ("c", [30 + i])]).logits for i in range(3)]
        runs[name] = (torch.stack(logits), [s.clone() for s in h.states.ssm if s is not None], kernels)
    (want, want_states, _), (got, got_states, kernels) = runs["reference"], runs["in pool"]
    assert kernels.calls["rule"] == 3 * 2, "every decode step of both DeltaNet layers ran in the pool"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for a, b in zip(got_states, want_states, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
