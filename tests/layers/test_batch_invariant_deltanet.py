"""The batch-invariant gated delta rule kernel (``recurrent_kernels/delta_rule_triton.py``) under
Triton's CPU interpreter: the float64 token loop to rounding, and the same bits for a request
alone, in any batch, in a prefill split anywhere, token by token, and as prefill or decode rows."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
from triton_interpreter import interpreter, load_interpreted  # noqa: F401 (fixture)

from hinge.testing.reference import reference_gated_delta_rule

pytestmark = pytest.mark.usefixtures("interpreter")


@pytest.fixture(scope="module")
def rule():
    return load_interpreted("layers/recurrent_kernels/delta_rule_triton.py").gated_delta_rule


def inputs(t, hk=2, hv=4, dk=8, dv=12, b=1, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(t, hk, dk, generator=gen).to(dtype)
    k = torch.randn(t, hk, dk, generator=gen).to(dtype)
    v = torch.randn(t, hv, dv, generator=gen).to(dtype)
    g = -torch.rand(t, hv, generator=gen) * 0.5
    beta = torch.rand(t, hv, generator=gen).to(dtype)
    s0 = torch.randn(b, hv, dk, dv, generator=gen) * 0.1
    return q, k, v, g, beta, s0


def run(rule, xs, s0, cu, track=False):
    return rule(*xs, s0, cu, track)


def piece(xs, a, b):
    return [x[a:b] for x in xs]


@pytest.mark.parametrize("hk,hv,dv", [(2, 4, 12), (3, 3, 8), (1, 2, 5)])
def test_outputs_states_and_states_per_row_equal_the_reference_gated_delta_rule(rule, hk, hv, dv):
    q, k, v, g, beta, s0 = inputs(23, hk=hk, hv=hv, dv=dv, seed=1)
    out, final, states = run(rule, (q, k, v, g, beta), s0, [0, 23], track=True)
    out64, s64, states64 = reference_gated_delta_rule(q, k, v, g, beta, s0[0])
    torch.testing.assert_close(out.double(), out64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(final[0].double(), s64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(states.double(), states64, rtol=1e-4, atol=1e-5)
    assert out.dtype == q.dtype and final.dtype == states.dtype == torch.float32


def test_bfloat16_inputs_give_bfloat16_outputs_close_to_float64(rule):
    q, k, v, g, beta, s0 = inputs(17, seed=2, dtype=torch.bfloat16)
    out, final, _ = run(rule, (q, k, v, g, beta), s0.to(torch.bfloat16), [0, 17])
    out64, s64, _ = reference_gated_delta_rule(q, k, v, g, beta, s0[0].to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), out64, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(final[0].double(), s64, rtol=1e-4, atol=1e-5)


def test_a_prefill_split_anywhere_or_token_by_token_gives_the_same_bits(rule):
    xs = inputs(37, seed=3)
    whole_out, whole_final, _ = run(rule, xs[:5], xs[5], [0, 37])
    for splits in ([0, 7, 8, 30, 37], [0, 1, 2, 36, 37], list(range(38))):
        state, outs = xs[5], []
        for a, b in pairwise(splits):
            out, state, _ = run(rule, piece(xs[:5], a, b), state, [0, b - a])
            outs.append(out)
        assert torch.equal(torch.cat(outs), whole_out), splits
        assert torch.equal(state, whole_final), splits


def test_a_request_has_the_same_bits_alone_and_in_mixed_batches(rule):
    cu = [0, 1, 38, 41, 42, 60]  # a decode row, a long prefill, short ones
    xs = inputs(60, b=5, seed=4)
    out, final, states = run(rule, xs[:5], xs[5], cu, track=True)
    for i, (a, b) in enumerate(pairwise(cu)):
        alone_out, alone_final, alone_states = run(rule, piece(xs[:5], a, b), xs[5][i : i + 1],
                                                   [0, b - a], track=True)
        assert torch.equal(out[a:b], alone_out), i
        assert torch.equal(final[i], alone_final[0]), i
        assert torch.equal(states[a:b], alone_states), i


def test_decode_rows_of_many_requests_equal_the_prefill_rows_of_one(rule):
    """A prefill of 9 tokens vs 9 decode steps of a batch of 4 requests of one token each (the
    uniform layout), the request under test in a different row every step."""
    q, k, v, g, beta, s0 = inputs(9, seed=5)
    prefill_out, prefill_final, _ = run(rule, (q, k, v, g, beta), s0, [0, 9])
    others = inputs(4, b=4, seed=6)
    state = s0
    for t in range(9):
        row = t % 4
        batch = [o.clone() for o in others[:5]]
        for x, mine in zip(batch, (q, k, v, g, beta), strict=True):
            x[row] = mine[t]
        s_batch = others[5].clone()
        s_batch[row] = state[0]
        out, final, _ = run(rule, batch, s_batch, [0, 1, 2, 3, 4])
        assert torch.equal(out[row], prefill_out[t]), t
        state = final[row : row + 1]
    assert torch.equal(state, prefill_final)


def test_an_empty_batch_returns_empty_results(rule):
    q, k, v, g, beta, s0 = inputs(0, b=0)
    out, final, states = run(rule, (q, k, v, g, beta), s0, [0], track=True)
    assert out.shape == (0, 4, 12) and final.shape == (0, 4, 8, 12) and states.shape == (0, 4, 8, 12)
