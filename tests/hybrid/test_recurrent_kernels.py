"""Recurrent kernels vs transformers' own torch functions and a float64 token loop."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from hinge.layers.recurrent_kernels import TorchRecurrentKernels, get_recurrent_kernels
from hinge.testing.reference import reference_gated_delta_rule

KERNELS = TorchRecurrentKernels()


def _inputs(t, hk=2, hv=4, dk=8, dv=6, b=1, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(t, hk, dk, generator=gen, dtype=dtype)
    k = torch.randn(t, hk, dk, generator=gen, dtype=dtype)
    v = torch.randn(t, hv, dv, generator=gen, dtype=dtype)
    g = -torch.rand(t, hv, generator=gen) * 0.5
    beta = torch.rand(t, hv, generator=gen, dtype=dtype)
    s0 = torch.randn(b, hv, dk, dv, generator=gen) * 0.1
    return q, k, v, g, beta, s0


def test_chunked_delta_rule_matches_float64_loop_across_chunk_boundaries():
    q, k, v, g, beta, s0 = _inputs(150)
    res = KERNELS.gated_delta_rule(q, k, v, g, beta, s0, [0, 150])
    out64, s64, _ = reference_gated_delta_rule(q, k, v, g, beta, s0[0])
    torch.testing.assert_close(res.out.double(), out64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(res.final_state[0].double(), s64, rtol=1e-4, atol=1e-5)


def test_chunked_and_recurrent_forms_match_transformers_functions():
    q, k, v, g, beta, s0 = _inputs(70)
    ref_out, ref_state = hf.torch_chunk_gated_delta_rule(
        q[None],
        k[None],
        v[None],
        g=g[None],
        beta=beta[None],
        initial_state=s0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    res = KERNELS.gated_delta_rule(q, k, v, g, beta, s0, [0, 70])
    torch.testing.assert_close(res.out, ref_out[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(res.final_state, ref_state, rtol=1e-4, atol=1e-5)
    q1, k1, v1, g1, b1, _ = _inputs(1, seed=3)
    ref_out, ref_state = hf.torch_recurrent_gated_delta_rule(
        q1[None],
        k1[None],
        v1[None],
        g=g1[None],
        beta=b1[None],
        initial_state=s0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    res = KERNELS.gated_delta_rule(q1, k1, v1, g1, b1, s0, [0, 1])
    torch.testing.assert_close(res.out, ref_out[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res.final_state, ref_state, rtol=1e-5, atol=1e-6)


def test_delta_rule_state_is_the_same_in_one_chunk_several_chunks_and_token_by_token():
    q, k, v, g, beta, s0 = _inputs(97, seed=1)
    whole = KERNELS.gated_delta_rule(q, k, v, g, beta, s0, [0, 97])
    state, outs = s0, []
    for s, e in [(0, 30), (30, 31), (31, 90), (90, 97)]:
        part = KERNELS.gated_delta_rule(
            q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], state, [0, e - s]
        )
        state = part.final_state
        outs.append(part.out)
    torch.testing.assert_close(state, whole.final_state, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat(outs), whole.out, rtol=1e-5, atol=1e-5)
    state = s0
    for t in range(97):
        state = KERNELS.gated_delta_rule(
            q[t : t + 1], k[t : t + 1], v[t : t + 1], g[t : t + 1], beta[t : t + 1], state, [0, 1]
        ).final_state
    torch.testing.assert_close(state, whole.final_state, rtol=1e-5, atol=1e-5)


def test_position_states_equal_states_of_each_prefix():
    q, k, v, g, beta, s0 = _inputs(5, seed=2)
    res = KERNELS.gated_delta_rule(q, k, v, g, beta, s0, [0, 5], track_states=True)
    for n in range(1, 6):
        prefix = KERNELS.gated_delta_rule(q[:n], k[:n], v[:n], g[:n], beta[:n], s0, [0, n])
        torch.testing.assert_close(
            res.position_states[n - 1], prefix.final_state[0], rtol=1e-5, atol=1e-6
        )
    torch.testing.assert_close(res.position_states[-1], res.final_state[0])


def test_mixed_length_batch_equals_each_request_alone():
    cu = [0, 1, 70, 73, 74]
    q, k, v, g, beta, s0 = _inputs(74, b=4, seed=4)
    for track in (False, True):
        res = KERNELS.gated_delta_rule(q, k, v, g, beta, s0, cu, track_states=track)
        for i, (s, e) in enumerate(pairwise(cu)):
            alone = KERNELS.gated_delta_rule(
                q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], s0[i : i + 1], [0, e - s]
            )
            torch.testing.assert_close(res.out[s:e], alone.out, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(
                res.final_state[i], alone.final_state[0], rtol=1e-5, atol=1e-5
            )


def test_padded_chunk_buckets_equal_each_request_alone_against_float64():
    # lengths 1 (decode row), 5 and 60 (one chunk), 70 and 128 (two chunks, one padded), 1
    cu = [0, 1, 6, 66, 136, 264, 265]
    q, k, v, g, beta, s0 = _inputs(265, b=6, seed=6)
    res = KERNELS.gated_delta_rule(q, k, v, g, beta, s0, cu)
    for i, (s, e) in enumerate(pairwise(cu)):
        out64, s64, _ = reference_gated_delta_rule(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], s0[i])
        torch.testing.assert_close(res.out[s:e].double(), out64, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(res.final_state[i].double(), s64, rtol=1e-4, atol=1e-5)


def _conv_inputs(t, c=6, kernel=4, b=1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(t, c, generator=gen),
        torch.randn(c, kernel, generator=gen),
        torch.randn(c, generator=gen),
        torch.randn(b, c, kernel - 1, generator=gen),
    )


def test_conv_from_empty_window_matches_transformers_conv1d_fn():
    x, w, bias, _ = _conv_inputs(9)
    zero = torch.zeros(1, 6, 3)
    res = KERNELS.causal_conv1d(x, w, bias, zero, [0, 9], activation="silu")
    ref = hf.causal_conv1d_fn(x.T[None], w, bias, activation="silu")
    torch.testing.assert_close(res.out, ref[0].T, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res.final_window[0], x[-3:].T)


def test_conv_decode_matches_transformers_conv1d_update():
    x, w, bias, window = _conv_inputs(1, seed=1)
    hf_state = torch.cat([torch.zeros(1, 6, 1), window], dim=-1)  # HF keeps K columns
    ref = hf.causal_conv1d_update(x.T[None], hf_state, w, bias, activation="silu")
    res = KERNELS.causal_conv1d(x, w, bias, window, [0, 1], activation="silu")
    torch.testing.assert_close(res.out, ref[0].T, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res.final_window, hf_state[:, :, 1:])


def test_conv_window_is_the_same_in_one_chunk_several_chunks_and_token_by_token():
    x, w, bias, window = _conv_inputs(11, seed=2)
    whole = KERNELS.causal_conv1d(x, w, None, window, [0, 11])
    state, outs = window, []
    for s, e in [(0, 1), (1, 2), (2, 7), (7, 11)]:
        part = KERNELS.causal_conv1d(x[s:e], w, None, state, [0, e - s])
        state, outs = part.final_window, outs + [part.out]
    torch.testing.assert_close(torch.cat(outs), whole.out, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(state, whole.final_window)
    tracked = KERNELS.causal_conv1d(x, w, None, window, [0, 11], track_states=True)
    for n in (1, 2, 5, 11):
        prefix = KERNELS.causal_conv1d(x[:n], w, None, window, [0, n])
        torch.testing.assert_close(tracked.position_windows[n - 1], prefix.final_window[0])


def test_conv_mixed_length_batch_equals_each_request_alone():
    cu = [0, 3, 4, 10]
    x, w, bias, window = _conv_inputs(10, b=3, seed=5)
    res = KERNELS.causal_conv1d(x, w, bias, window, cu, activation="silu", track_states=True)
    for i, (s, e) in enumerate(pairwise(cu)):
        alone = KERNELS.causal_conv1d(
            x[s:e], w, bias, window[i : i + 1], [0, e - s], activation="silu"
        )
        torch.testing.assert_close(res.out[s:e], alone.out)
        torch.testing.assert_close(res.final_window[i], alone.final_window[0])
        torch.testing.assert_close(res.position_windows[e - 1], alone.final_window[0])


def test_unknown_or_misplaced_kernel_names_fail_with_the_choices():
    assert get_recurrent_kernels("cpu").name == "torch"
    with pytest.raises(ValueError, match="auto, torch, fla"):
        get_recurrent_kernels("cpu", "triton")
    with pytest.raises(ValueError, match="need a CUDA device"):
        get_recurrent_kernels("cpu", "fla")


DETERMINISTIC = TorchRecurrentKernels(deterministic=True)


def test_deterministic_delta_rule_matches_float64_loop_and_per_position_states():
    q, k, v, g, beta, s0 = _inputs(40, seed=6)
    res = DETERMINISTIC.gated_delta_rule(q, k, v, g, beta, s0, [0, 40], track_states=True)
    out64, s64, states64 = reference_gated_delta_rule(q, k, v, g, beta, s0[0])
    torch.testing.assert_close(res.out.double(), out64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(res.final_state[0].double(), s64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(res.position_states.double(), states64, rtol=1e-4, atol=1e-5)


def test_deterministic_delta_rule_bits_do_not_depend_on_batch_or_chunking():
    cu = [0, 3, 40, 41, 60, 90]
    q, k, v, g, beta, s0 = _inputs(90, b=5, seed=7)
    batch = DETERMINISTIC.gated_delta_rule(q, k, v, g, beta, s0, cu)
    s, e = 3, 40  # request 1 alone, in one step and in three chunks of odd sizes
    alone = DETERMINISTIC.gated_delta_rule(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], s0[1:2], [0, 37])
    assert torch.equal(alone.out, batch.out[s:e])
    assert torch.equal(alone.final_state[0], batch.final_state[1])
    state, outs = s0[1:2], []
    for a, b in [(3, 10), (10, 11), (11, 40)]:
        part = DETERMINISTIC.gated_delta_rule(q[a:b], k[a:b], v[a:b], g[a:b], beta[a:b], state, [0, b - a])
        state, outs = part.final_state, outs + [part.out]
    assert torch.equal(state[0], batch.final_state[1])
    assert torch.equal(torch.cat(outs), batch.out[s:e])


def test_deterministic_decode_rows_in_a_batch_equal_the_prefill_rows():
    """One request's 9 tokens as one prefill vs 9 decode steps of 4 one-token requests, the
    request in a different row every step: the same outputs and state, bit for bit."""
    q, k, v, g, beta, s0 = _inputs(9, seed=8)
    prefill = DETERMINISTIC.gated_delta_rule(q, k, v, g, beta, s0, [0, 9])
    others = _inputs(4, b=4, seed=9)
    state = s0
    for t in range(9):
        row = (t * 3) % 4
        batch = [x.clone() for x in others[:5]]
        for x, mine in zip(batch, (q, k, v, g, beta), strict=True):
            x[row] = mine[t]
        states = others[5].clone()
        states[row] = state[0]
        step = DETERMINISTIC.gated_delta_rule(*batch, states, [0, 1, 2, 3, 4])
        assert torch.equal(step.out[row], prefill.out[t]), t
        state = step.final_state[row : row + 1]
    assert torch.equal(state, prefill.final_state)
