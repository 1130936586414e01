"""The in-place decode conv (``conv_in_pool``) on CPU under Triton's interpreter: each request
continues from its read slot's window (zeros when fresh), its output is the torch reference
conv's, its new window lands in its write slot and nothing else in the pool changes; a tiny
Qwen3.5 and a tiny LFM2 decoding through it (and the in-pool delta rule) match the reference
kernels, with fewer ops per step. Speed and CUDA bits are GPU checks (test_conv_in_pool_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hybrid_harness import InterpretedInPool, StepHarness, interpreted_kernel, load_hinge
from test_decode_op_counts import decode_ops

import hinge
from hinge.layers.recurrent_kernels import TorchRecurrentKernels
from hinge.layers.recurrent_kernels.torch_ref import torch_causal_conv1d
from hinge.testing.triton_interpreter import patch_interpreter

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def modules():
    return interpreted_kernel("conv_in_pool"), interpreted_kernel("decode_in_pool")


@pytest.fixture
def conv(monkeypatch, modules):
    patch_interpreter(monkeypatch)
    return modules[0].conv_in_pool


def _inputs(b, c=300, k=4, slots=8, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, c + 5, generator=gen).to(dtype)[:, 5:]  # a view, as the in_proj split gives
    weight = torch.randn(c, k, generator=gen).to(dtype)
    bias = torch.randn(c, generator=gen).to(dtype)
    pool = torch.randn(slots, c, k - 1, generator=gen).to(dtype)
    return x, weight, bias, pool


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_request_continues_its_window_and_writes_the_next_one_to_its_write_slot_only(
        conv, activation, dtype):
    x, weight, bias, pool = _inputs(4, dtype=dtype)
    before = pool.clone()
    read, write = torch.tensor([3, 5, 1, 2]), torch.tensor([3, 6, 4, 0])  # in place; elsewhere...
    prefix = torch.tensor([7, 0, 2, 9])  # request 1 is fresh: zeros, not slot 5's window
    for b in (None, bias):
        pool.copy_(before)
        out = conv(x, weight, b, pool, read, write, prefix, activation=activation)
        windows = torch.stack([before[r] if p else torch.zeros_like(before[0])
                               for r, p in zip(read.tolist(), prefix.tolist(), strict=True)])
        want = torch_causal_conv1d(x, weight, b, windows, list(range(5)), activation=activation)
        tol = dict(rtol=0, atol=0) if dtype == torch.float32 and activation is None else \
            dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(out, want.out, **tol)
        assert torch.equal(pool[write], want.final_window.to(dtype)), "the window after the token"
        untouched = [s for s in range(pool.shape[0]) if s not in write.tolist()]
        assert torch.equal(pool[untouched], before[untouched]), "only the write slots change"


@pytest.mark.parametrize("block_c, num_warps", [(64, 1), (128, 2), (512, 8)])
def test_any_channel_tiling_gives_the_same_bits(conv, block_c, num_warps):
    """300 channels: ragged for every block; a channel's sum is its own, so the sweep's tilings
    (``tools/gpu/recurrent_decode.py --sweep``) may replace the default without changing bits."""
    x, weight, bias, pool = _inputs(3, seed=7)
    read, write, prefix = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), torch.tensor([2, 0, 1])
    base = pool.clone()
    want = conv(x, weight, bias, base, read, write, prefix, activation="silu")
    got = conv(x, weight, bias, pool, read, write, prefix, activation="silu", block_c=block_c,
               num_warps=num_warps)
    assert torch.equal(got, want) and torch.equal(pool, base)


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_exact_variant_gives_the_torch_convs_bits_for_deterministic_mode(
        monkeypatch, modules, activation, dtype):
    """Deterministic mode: a decode row through the pool must be the bits the torch conv gives
    the same position in a prefill (the kernel's float32 sum in the reference's order without
    fused multiply-adds, the activation and the cast by torch)."""
    patch_interpreter(monkeypatch)
    x, weight, bias, pool = _inputs(5, dtype=dtype, seed=3)
    read, write, prefix = torch.tensor([3, 5, 1, 2, 7]), torch.tensor([3, 6, 4, 0, 7]), \
        torch.tensor([7, 0, 2, 9, 1])
    windows = torch.stack([pool[r] if p else torch.zeros_like(pool[0])
                           for r, p in zip(read.tolist(), prefix.tolist(), strict=True)])
    for b in (None, bias):
        want = torch_causal_conv1d(x, weight, b, windows, list(range(6)), activation=activation,
                                   deterministic=True)
        out = modules[0].conv_in_pool_exact(x, weight, b, pool.clone(), read, write, prefix,
                                            activation=activation)
        assert out.dtype == dtype and torch.equal(out, want.out), (
            f"max diff {(out.float() - want.out.float()).abs().max():.3g}")
    with pytest.raises(ValueError, match="activation 'gelu'"):
        modules[0].conv_in_pool_exact(x, weight, None, pool, read, write, prefix, activation="gelu")


def test_an_empty_step_and_a_pool_of_another_width(conv):
    x, weight, bias, pool = _inputs(0)
    empty = torch.zeros(0, dtype=torch.int64)
    assert conv(x, weight, None, pool, empty, empty, empty).shape == (0, 300)
    x, weight, bias, pool = _inputs(2)
    with pytest.raises(ValueError, match=r"pool \(slots, C, K-1\)"):
        conv(x, weight, None, pool[:, :100], torch.tensor([1, 2]), torch.tensor([1, 2]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="activation 'gelu'"):
        conv(x, weight, None, pool, torch.tensor([1, 2]), torch.tensor([1, 2]), torch.tensor([1, 1]),
             activation="gelu")


@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_a_tiny_hybrid_decoding_in_the_pool_matches_the_reference_kernels(
        monkeypatch, modules, hybrid_checkpoints, arch):
    patch_interpreter(monkeypatch)
    path = hybrid_checkpoints(arch)
    runs = {}
    for name, kernels in (("reference", TorchRecurrentKernels()),
                          ("in pool", InterpretedInPool(conv=modules[0], rule=modules[1]))):
        model = load_hinge(path)
        model.set_recurrent_kernels(kernels)
        h = StepHarness(model, max_requests=4)
        h.step([("a", [5, 6, 7, 8]), ("b", [9, 10]), ("c", [11])])  # prefill: the gather path
        logits = [h.step([("a", [12 + i]), ("b", [20 + i]), ("c", [30 + i])]).logits for i in range(3)]
        runs[name] = (torch.stack(logits), [w.clone() for w in h.states.conv], kernels)
    (want, want_windows, _), (got, got_windows, kernels) = runs["reference"], runs["in pool"]
    layers = len(load_hinge(path).recurrent_layers)
    assert kernels.calls["conv"] == 3 * layers, "every decode step of every recurrent layer"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for a, b in zip(got_windows, want_windows, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_decode_step_with_the_conv_in_the_pool_gathers_and_scatters_no_window(
        monkeypatch, modules, hybrid_checkpoints):
    patch_interpreter(monkeypatch)
    model = load_hinge(hybrid_checkpoints("Qwen3_5ForCausalLM"))
    model.set_recurrent_kernels(InterpretedInPool(rule=modules[1]))  # the delta rule alone
    conv_gather = decode_ops(model, 4, capture_view=True)
    model.set_recurrent_kernels(InterpretedInPool(conv=modules[0], rule=modules[1]))
    small, large = (decode_ops(model, b, capture_view=True) for b in (2, 16))
    assert {op: (small[op], large[op]) for op in set(small) | set(large) if small[op] != large[op]} == {}
    layers = len(model.recurrent_layers)
    # per DeltaNet layer, beside what the in-pool delta rule saves: no window gather (index_select),
    # no concatenation (cat) and one scatter (index_copy_) fewer: only the stamps are written
    assert conv_gather["aten::cat"] - small["aten::cat"] >= layers
    assert sum(conv_gather.values()) - sum(small.values()) >= 10 * layers


@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Lfm2ForCausalLM"])
def test_a_decode_step_in_the_pool_ending_on_a_checkpoint_writes_and_stamps_that_slot_only(
        monkeypatch, modules, hybrid_checkpoints, arch):
    """Invariant 1 on the in-pool path: the step's state write aimed at the checkpoint slot, its
    stamp the receipt, the slot it read untouched."""
    from test_checkpoint_writes import CHECKPOINT, OWN, PROMPT, Pools

    patch_interpreter(monkeypatch)
    model = load_hinge(hybrid_checkpoints(arch))
    kernels = InterpretedInPool(conv=modules[0], rule=modules[1])
    model.set_recurrent_kernels(kernels)
    pools = Pools(model, False)
    pools.step(PROMPT[:8], stamp=1)  # prefill: the gather path
    before = pools.state(OWN)
    pools.step(PROMPT[8:9], stamp=2, write_slot=CHECKPOINT)  # one token: in the pool
    assert kernels.calls["conv"] == len(model.recurrent_layers)
    reference = Pools(load_hinge(hybrid_checkpoints(arch)), False)
    reference.step(PROMPT[:9], stamp=1)
    for got, want in zip(pools.state(CHECKPOINT), reference.state(OWN), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
    for got, want in zip(pools.state(OWN), before, strict=True):
        assert torch.equal(got, want), "the slot read is not written"
    assert pools.states.receipt([CHECKPOINT], 2).written() == [True]


@pytest.mark.parametrize("silu", [True, False])
def test_the_kernel_compiles_for_hopper_without_spilling(silu):
    """The interpreter takes code the compiler refuses: compile it for sm_90 (the H200) here."""
    pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")
    import sys

    sys.path.insert(0, str(Path(hinge.__file__).parents[2] / "tools" / "kernels"))
    import sass_loop

    from hinge.layers.recurrent_kernels.conv_in_pool import BLOCK_C, _conv_in_pool_kernel

    sig = dict(x_ptr="*bf16", w_ptr="*bf16", b_ptr="*bf16", pool_ptr="*bf16", read_ptr="*i64",
               write_ptr="*i64", prefix_ptr="*i64", out_ptr="*bf16", C="i32", stride_xt="i32",
               stride_wc="i32", stride_ps="i32", stride_pc="i32", stride_ot="i32")
    kernel = sass_loop.compile_for_hopper(
        _conv_in_pool_kernel, sig, dict(K=4, KP2=4, HAS_BIAS=False, SILU=silu, BLOCK=BLOCK_C),
        num_warps=4, num_stages=1)
    registers, spilled = sass_loop.ptxas_usage(kernel)
    assert spilled == 0 and 0 < registers <= 128


def test_deterministic_decode_in_the_pool_with_the_invariant_fast_kernels_gives_its_prefill_bits(
        monkeypatch, modules, hybrid_checkpoints):
    """Deterministic mode as CUDA runs it, interpreted: the decode conv window read and written in
    the pool (``conv_in_pool_exact``), the prefill conv in one kernel (``conv_prefill_exact``) and
    the fast kernels deterministic mode takes (gates, gated norm one row a program, add+RMSNorm,
    q/k-norm+rope) in prefill and decode alike. Tokens
    decoded one by one then give the bits one prefill of them gives (the delta rule keeps the
    deterministic gather path here: its CPU torch loop and the interpreted kernel are different
    arithmetic, compared to a tolerance above)."""
    import types

    from hinge.layers import fast_triton
    from hinge.testing.triton_interpreter import load_interpreted

    patch_interpreter(monkeypatch)
    fast_dir = Path(hinge.__file__).parent / "layers" / "fast_triton"
    fake = types.SimpleNamespace(**{name: load_interpreted(fast_dir / f"{name}.py", f"_det_{name}")
                                    for name in ("gemv", "add_rmsnorm", "silu_mul", "qk_norm_rope",
                                                 "gdn_gating", "gated_rmsnorm", "kv_write")})
    monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False:
                        invariant or not deterministic)
    monkeypatch.setattr(fast_triton, "kernels", lambda: fake)
    from hinge.layers.recurrent_kernels import conv_prefill

    prefill_conv = interpreted_kernel("conv_prefill")
    prefills = []
    monkeypatch.setattr(conv_prefill, "conv_prefill_exact",
                        lambda *a, **k: prefills.append(1) or prefill_conv.conv_prefill_exact(*a, **k))
    model = load_hinge(hybrid_checkpoints("Qwen3_5ForCausalLM"), deterministic=True)
    kernels = InterpretedInPool(conv=modules[0], deterministic=True)
    model.set_recurrent_kernels(kernels)
    prompt, follow = [5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15]
    whole = StepHarness(model, deterministic=True).step([("a", prompt + follow)], all_logits=True)
    h = StepHarness(model, deterministic=True)
    rows = [h.step([("a", prompt)], all_logits=True).logits]
    rows += [h.step([("a", [t])], all_logits=True).logits for t in follow]
    assert kernels.calls["conv"] == len(follow) * len(model.recurrent_layers), "decodes in the pool"
    assert len(prefills) == 2 * len(model.recurrent_layers), "both prefills took the exact kernel"
    assert torch.equal(torch.cat(rows), whole.logits)
