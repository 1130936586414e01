"""The fla path's calling convention, checked on CPU with stand-ins that enforce fla's API
(batch 1 + long ``cu_seqlens`` + one initial state per sequence for chunk; bf16/fp16 for chunk)
and compute with transformers' torch functions. The real kernels run in test_gpu_kernels.py."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from hinge.layers.recurrent_kernels import TorchRecurrentKernels, fla_kernels
from hinge.layers.recurrent_kernels.fla_kernels import FlaRecurrentKernels

CALLS: list[str] = []


def fla_chunk_indices(cu_seqlens: torch.Tensor, chunk_size: int = 64) -> torch.Tensor:
    """fla's ``prepare_chunk_indices`` restated from its definition: per chunk of ``chunk_size``
    tokens, [its sequence, its index within that sequence]."""
    counts = (cu_seqlens[1:] - cu_seqlens[:-1] + chunk_size - 1) // chunk_size
    seg = torch.repeat_interleave(torch.arange(len(counts)), counts)
    start = torch.cat([torch.zeros(1, dtype=counts.dtype), counts.cumsum(0)])[:-1]
    return torch.stack([seg, torch.arange(len(seg)) - start[seg]], 1)


SEEN_INDICES: list[torch.Tensor] = []


def fake_chunk(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
               cu_seqlens, chunk_indices):
    assert q.shape[0] == 1 and cu_seqlens.dtype == torch.long and q.dtype != torch.float32
    # made on the host once per step, not by fla from the device cu_seqlens (a sync per layer)
    assert chunk_indices.dtype == torch.long and torch.equal(chunk_indices, fla_chunk_indices(cu_seqlens))
    SEEN_INDICES.append(chunk_indices)
    assert initial_state.shape[0] == len(cu_seqlens) - 1 and use_qk_l2norm_in_kernel
    assert scale == q.shape[-1] ** -0.5 and q.shape[2] == v.shape[2]
    CALLS.append("chunk")
    outs, finals = [], []
    for i, (s, e) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True)):
        o, f = hf.torch_chunk_gated_delta_rule(
            q[:, s:e], k[:, s:e], v[:, s:e], g=g[:, s:e], beta=beta[:, s:e],
            initial_state=initial_state[i : i + 1], output_final_state=True, use_qk_l2norm_in_kernel=True)
        outs.append(o)
        finals.append(f)
    return torch.cat(outs, dim=1), torch.cat(finals)


def fake_recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel):
    assert q.shape[1] == 1 and initial_state.shape[0] == q.shape[0] and use_qk_l2norm_in_kernel
    CALLS.append("recurrent")
    return hf.torch_recurrent_gated_delta_rule(
        q, k, v, g=g, beta=beta, initial_state=initial_state, output_final_state=True,
        use_qk_l2norm_in_kernel=True)


class CpuFla(FlaRecurrentKernels):
    def runs_on(self, x):
        return True


@pytest.fixture(autouse=True)
def chunk_pipeline_for_every_prefill(monkeypatch):
    """These tests check fla's calling convention on short prompts: the short-prefill switch
    (``HINGE_TOKEN_RECURRENCE_MAX``) off unless a test sets it."""
    monkeypatch.setenv(fla_kernels.TOKEN_RECURRENCE_ENV, "0")


def _inputs(lens, hk=2, hv=4, dk=8, dv=6):
    gen = torch.Generator().manual_seed(0)
    t = sum(lens)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    args = (torch.randn(t, hk, dk, generator=gen).bfloat16(), torch.randn(t, hk, dk, generator=gen).bfloat16(),
            torch.randn(t, hv, dv, generator=gen).bfloat16(), -torch.rand(t, hv, generator=gen),
            torch.rand(t, hv, generator=gen).bfloat16(), torch.randn(len(lens), hv, dk, dv, generator=gen) * 0.1)
    return args, cu


def test_fla_path_packs_prefill_and_decode_as_fla_expects_and_matches_the_reference(monkeypatch):
    monkeypatch.setattr(fla_kernels, "_import_fla", lambda: (fake_chunk, fake_recurrent))
    kernels, ref = CpuFla(), TorchRecurrentKernels()
    for lens, call in (([3, 70, 1, 9], "chunk"), ([1, 1, 1], "recurrent")):
        CALLS.clear()
        args, cu = _inputs(lens)
        got, want = kernels.gated_delta_rule(*args, cu), ref.gated_delta_rule(*args, cu)
        assert CALLS == [call]
        torch.testing.assert_close(got.out.float(), want.out.float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(got.final_state, want.final_state, rtol=1e-4, atol=1e-4)
    CALLS.clear()
    tracked = kernels.gated_delta_rule(*args, cu, track_states=True)
    assert CALLS == [] and tracked.position_states.shape[0] == sum(lens)


def test_every_layer_of_a_step_shares_one_host_made_set_of_chunk_indices(monkeypatch):
    """24 DeltaNet layers of a prefill take the same chunk-index tensor (made once on the host);
    the next step's layout gets its own. Long and empty sequences cut into 64-token chunks."""
    monkeypatch.setattr(fla_kernels, "_import_fla", lambda: (fake_chunk, fake_recurrent))
    kernels = CpuFla()
    SEEN_INDICES.clear()
    args, cu = _inputs([130, 5, 64])
    for _ in range(3):
        kernels.gated_delta_rule(*args, cu)
    assert len(SEEN_INDICES) == 3 and all(t is SEEN_INDICES[0] for t in SEEN_INDICES)
    assert SEEN_INDICES[0].tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [2, 0]]
    other, cu2 = _inputs([65, 2])
    kernels.gated_delta_rule(*other, cu2)
    assert SEEN_INDICES[-1].tolist() == [[0, 0], [0, 1], [1, 0]]
    assert fla_kernels._chunk_indices((0, 0, 3), torch.device("cpu")).tolist() == [[1, 0]]


@pytest.mark.parametrize("lens", [[1, 1, 1], [5, 9, 2]], ids=["one-row path", "chunk path"])
def test_fla_gets_aligned_copies_of_row_slices_that_start_anywhere(monkeypatch, lens):
    """A checkpoint-split prefill passes row slices that start anywhere; fla's kernels specialize
    on 16-byte pointer alignment, so what they get must be fresh tensors (else a compile per
    alignment after the warm-up)."""
    seen = []

    def recording(fake):
        def call(q, k, v, g, beta, **kw):
            seen.extend(t.data_ptr() % 16 for t in (q, k, v, g, beta))
            return fake(q, k, v, g, beta, **kw)
        return call

    monkeypatch.setattr(fla_kernels, "_import_fla",
                        lambda: (recording(fake_chunk), recording(fake_recurrent)))
    args, _ = _inputs([1, *lens])
    # every input without its first row: a one-row offset (misaligned for these widths)
    sliced = tuple(x[1:] for x in args[:5]) + (args[5][1:],)
    assert any(x.data_ptr() % 16 for x in sliced[:5])
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    got = CpuFla().gated_delta_rule(*sliced, cu)
    want = TorchRecurrentKernels().gated_delta_rule(*sliced, cu)
    assert seen and all(offset == 0 for offset in seen)
    torch.testing.assert_close(got.out.float(), want.out.float(), rtol=2e-2, atol=2e-2)


def test_short_prefills_take_the_token_recurrence_up_to_the_switch_and_the_warm_up_passes_it(monkeypatch):
    """``HINGE_TOKEN_RECURRENCE_MAX=N`` (default 128): prefill steps whose longest request has at
    most N tokens go to hinge's token-recurrence kernel; longer ones and decode steps keep fla's,
    0 sends every prefill to fla's chunk pipeline; the kernels ask the warm-up for two prompts
    past N (an ordinary length and a multiple of 16), none when the switch is off; a value that
    is not a count is refused naming the variable."""
    from hinge.layers.recurrent_kernels import delta_rule_triton

    monkeypatch.setattr(fla_kernels, "_import_fla", lambda: (fake_chunk, fake_recurrent))
    monkeypatch.setattr(delta_rule_triton, "gated_delta_rule",
                        lambda *a: CALLS.append("token recurrence") or ("out", "final", None))

    def kernels(env):
        if env is None:
            monkeypatch.delenv(fla_kernels.TOKEN_RECURRENCE_ENV, raising=False)
        else:
            monkeypatch.setenv(fla_kernels.TOKEN_RECURRENCE_ENV, env)
        return CpuFla()

    def route(lens, env=None):
        CALLS.clear()
        args, cu = _inputs(lens)
        kernels(env).gated_delta_rule(*args, cu)
        return CALLS[:]

    assert fla_kernels.TOKEN_RECURRENCE_DEFAULT == 128
    assert route([3, 128, 9]) == ["token recurrence"]
    assert route([3, 129, 9]) == ["chunk"]
    assert route([3, 70, 9], "0") == ["chunk"]
    assert route([3, 70, 9], "70") == ["token recurrence"]
    assert route([3, 71, 9], "70") == ["chunk"]
    assert route([1, 1, 1], "70") == ["recurrent"]
    for env, lengths in ((None, (129, 144)), ("70", (71, 80)), ("15", (17, 16)), ("0", ())):
        asked = kernels(env).warmup_prompt_lengths()
        assert asked == lengths, f"{env}: {asked}"
        cap = kernels(env).token_recurrence_max
        assert all(n > cap for n in asked) and {n % 16 == 0 for n in asked} == ({True, False} if asked else set())
    with pytest.raises(ValueError, match="HINGE_TOKEN_RECURRENCE_MAX"):
        route([3], "many")


def test_default_mode_decodes_in_the_pool_with_its_own_tiling(monkeypatch):
    """The fla kernels' in-place decode takes ``DEFAULT_MODE_TILE`` (faster on the H200; other
    bits than the deterministic tiling, which deterministic mode keeps)."""
    from hinge.layers.recurrent_kernels import decode_in_pool

    seen = []
    monkeypatch.setattr(fla_kernels, "_import_fla", lambda: (fake_chunk, fake_recurrent))
    monkeypatch.setattr(decode_in_pool, "decode_in_pool", lambda *a, tile=None: seen.append(tile))
    CpuFla().decode_in_pool(*([None] * 9))
    assert seen == [decode_in_pool.DEFAULT_MODE_TILE] and decode_in_pool.DEFAULT_MODE_TILE == (32, 1)
