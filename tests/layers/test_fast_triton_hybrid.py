"""The gated DeltaNet's fused kernels (``fast_triton.gdn_gating``, ``fast_triton.gated_rmsnorm``).

- Under Triton's CPU interpreter: each against its formula in float64, on views of a wider
  projection (as the layer passes them), ragged token counts, head counts not a power of two,
  softplus past its threshold and far below zero.
- A tiny Qwen3.5 with the kernels forced on (interpreted) calls each once per DeltaNet layer and
  step (and ``qk_norm_rope`` once per gated attention layer), and its logits stay within 1e-4 of
  the plain path.
- ``gpu`` tests compare each with the torch formulas at Qwen3.5-9B sizes.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from triton_interpreter import counting, interpreter, load_interpreted  # noqa: F401 (fixture)

from hinge.layers import fast_triton

BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}


def randn(*shape, seed, dtype=torch.float32, scale=1.0, device="cpu"):
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)


def gates64(a, b, a_log, dt_bias):
    s = a.double() + dt_bias.double()
    return -a_log.double().exp() * F.softplus(s), torch.sigmoid(b.double())


def gated_norm64(x, z, w, eps):
    x = x.double()
    n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    return n * F.silu(z.double())


@pytest.fixture(scope="module")
def kernels():
    return types.SimpleNamespace(**{name: load_interpreted(f"layers/fast_triton/{name}.py")
                                    for name in ("gdn_gating", "gated_rmsnorm")})


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t", [1, 3, 70])
def test_gdn_gating_equals_the_float64_gates_on_views_of_the_projection(kernels, dtype, t):
    h = 6
    proj = randn(t, 40, seed=t, dtype=dtype, scale=8.0)  # |a + dt_bias| past 20 and far below 0
    b, a = proj[:, 10:10 + h], proj[:, 20:20 + h]
    a_log, dt_bias = randn(h, seed=1, dtype=dtype), randn(h, seed=2, dtype=dtype)
    g, beta = kernels.gdn_gating.gdn_gating(a, b, a_log, dt_bias)
    g64, beta64 = gates64(a, b, a_log, dt_bias)
    assert g.dtype == torch.float32 and beta.dtype == dtype and g.shape == beta.shape == (t, h)
    torch.testing.assert_close(g.double(), g64, rtol=1e-5, atol=1e-6)
    err = float((beta.double() - beta64).abs().max())
    assert err <= BOUNDS[dtype], err


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t", [1, 5, 33])
def test_gated_rmsnorm_equals_the_float64_norm_times_silu_with_z_a_view(kernels, dtype, t):
    h, d = 3, 24
    x = randn(t, h, d, seed=t, dtype=dtype, scale=3.0)
    z = randn(t, 200, seed=t + 50, dtype=dtype)[:, 100:100 + h * d].view(t, h, d)  # a view
    w = randn(d, seed=3, dtype=dtype)
    out = kernels.gated_rmsnorm.gated_rmsnorm(x, z, w, 1e-6)
    ref = gated_norm64(x, z, w, 1e-6)
    assert out.dtype == dtype and out.shape == (t, h, d) and out.is_contiguous()
    err = float((out.double() - ref).abs().max())
    assert err <= BOUNDS[dtype] * max(1.0, float(ref.abs().max())), err


def test_both_refuse_what_they_cannot_take_naming_the_fallback():
    from hinge.layers.fast_triton import gated_rmsnorm, gdn_gating

    x = torch.randn(4, 3, 8)
    assert not gated_rmsnorm.supports(x, x.transpose(1, 2))
    with pytest.raises(ValueError, match="use the norm and silu instead"):
        gated_rmsnorm.gated_rmsnorm(x, x[:, :, :4], torch.ones(8), 1e-6)
    assert not gdn_gating.supports(torch.randn(4, 6), torch.randn(6, 4).t())
    with pytest.raises(ValueError, match="use the torch formulas instead"):
        gdn_gating.gdn_gating(torch.randn(4, 6), torch.randn(4, 5), torch.zeros(6), torch.zeros(6))


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("deterministic", [False, True])
def test_a_tiny_qwen3_5_with_the_interpreted_kernels_forced_on_calls_each_per_deltanet_layer(
        kernels, monkeypatch, tmp_path, deterministic):
    """Deterministic mode takes the same per-row kernels (the gated norm one row a program); its
    MLP keeps the batch-invariant gated activation."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hybrid"))
    from hybrid_harness import StepHarness, load_hinge, make_hybrid_checkpoint

    path = make_hybrid_checkpoint(tmp_path, "Qwen3_5ForCausalLM")
    torch.set_num_threads(1)

    def run(model):
        h = StepHarness(model, max_requests=3)
        out = [h.step([("a", [5, 6, 7, 8]), ("b", [9, 10])]).logits]
        return torch.cat(out + [h.step([("a", [12 + i]), ("b", [20 + i])]).logits for i in range(2)])

    plain = run(load_hinge(path, deterministic=deterministic))
    calls = {"gdn_gating": 0, "gated_rmsnorm": 0, "qk_norm_rope": 0, "silu_mul": 0, "add_rmsnorm": 0}
    norm_rows = []

    def counted(module, name):
        return counting(module, name, calls)

    def gated_rmsnorm(*args, rows=None):
        norm_rows.append(rows)
        return kernels.gated_rmsnorm.gated_rmsnorm(*args, rows=rows)

    fake = types.SimpleNamespace(**{name: load_interpreted(f"layers/fast_triton/{name}.py")
                                    for name in ("gemv", "kv_write")})
    fake.add_rmsnorm = counted(load_interpreted("layers/fast_triton/add_rmsnorm.py"), "add_rmsnorm")
    fake.silu_mul = counted(load_interpreted("layers/fast_triton/silu_mul.py"), "silu_mul")
    fake.qk_norm_rope = counted(load_interpreted("layers/fast_triton/qk_norm_rope.py"), "qk_norm_rope")
    fake.gdn_gating = counted(kernels.gdn_gating, "gdn_gating")
    fake.gated_rmsnorm = counted(types.SimpleNamespace(
        supports=kernels.gated_rmsnorm.supports, gated_rmsnorm=gated_rmsnorm), "gated_rmsnorm")
    monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False:
                        invariant or not deterministic)
    monkeypatch.setattr(fast_triton, "kernels", lambda: fake)
    # deterministic mode's one-kernel conv (``conv_prefill_exact``) under the interpreter too
    from hinge.layers.recurrent_kernels import conv_prefill

    monkeypatch.setattr(conv_prefill, "conv_prefill_exact",
                        load_interpreted("layers/recurrent_kernels/conv_prefill.py").conv_prefill_exact)
    model = load_hinge(path, deterministic=deterministic)
    fast = run(model)
    deltanets, attention = len(model.recurrent_layers), len(model.attention_layers)
    # the gated attention's (1 + w) q/k norms and partial rotary take the fused kernel too
    silu_mul = 0 if deterministic else 3 * len(model.model.layers)  # the batch-invariant GLU
    assert calls == {
        "gdn_gating": 3 * deltanets, "gated_rmsnorm": 3 * deltanets,
        "qk_norm_rope": 3 * attention, "silu_mul": silu_mul,
        "add_rmsnorm": 3 * 2 * len(model.model.layers)}  # the first input norm has no residual,
    # the final norm takes the last
    assert set(norm_rows) == ({1} if deterministic else {None})
    torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-4)


# -- CUDA ----------------------------------------------------------------------------------------

gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("t", [1, 64, 1000])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gdn_gating_matches_the_torch_formulas_at_qwen3_5_9b_sizes(t):
    from hinge.layers.fast_triton.gdn_gating import gdn_gating

    proj = randn(t, 256, seed=t, dtype=torch.bfloat16, device="cuda", scale=4.0)
    b, a = proj[:, :32], proj[:, 32:64]
    a_log = randn(32, seed=1, dtype=torch.bfloat16, device="cuda")
    dt_bias = randn(32, seed=2, dtype=torch.bfloat16, device="cuda")
    g, beta = gdn_gating(a, b, a_log, dt_bias)
    torch.testing.assert_close(g, -a_log.float().exp() * F.softplus(a.float() + dt_bias), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(beta, torch.sigmoid(b), rtol=0, atol=2 ** -8)


@pytest.mark.parametrize("t", [1, 64, 1000])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gated_rmsnorm_matches_the_norm_times_silu_at_qwen3_5_9b_sizes(t):
    from hinge.layers.fast_triton.gated_rmsnorm import gated_rmsnorm

    x = randn(t, 32, 128, seed=t, dtype=torch.bfloat16, device="cuda")
    z = randn(t, 9000, seed=t + 1, dtype=torch.bfloat16, device="cuda")[:, 100:100 + 4096].view(t, 32, 128)
    w = randn(128, seed=3, dtype=torch.bfloat16, device="cuda")
    want = (F.rms_norm(x, (128,), w, 1e-6) * F.silu(z.float())).to(torch.bfloat16)
    got = gated_rmsnorm(x, z, w, 1e-6)
    torch.testing.assert_close(got.float(), want.float(), rtol=1.6e-2, atol=1.6e-2)


@pytest.mark.parametrize("name", ["gdn_gating", "gated_rmsnorm"])
def test_the_kernel_compiles_for_hopper_without_spilling(name):
    """The interpreter takes code the compiler refuses: compile for sm_90 (the H200) here."""
    pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "kernels"))
    import sass_loop

    from hinge.layers.fast_triton import gated_rmsnorm, gdn_gating

    if name == "gdn_gating":
        fn = gdn_gating._gdn_gating_kernel
        sig = dict(a_ptr="*bf16", b_ptr="*bf16", alog_ptr="*bf16", dt_ptr="*bf16", g_ptr="*fp32",
                   beta_ptr="*bf16", T="i32", H="i32", stride_a="i32", stride_b="i32",
                   stride_g="i32", stride_beta="i32")
        consts = dict(BLOCK_T=64, BLOCK_H=32)
    else:
        fn = gated_rmsnorm._gated_rmsnorm_kernel
        sig = dict(x_ptr="*bf16", z_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", R="i32", H="i32",
                   D="i32", stride_xt="i32", stride_xh="i32", stride_zt="i32", stride_zh="i32",
                   eps="fp32")
        consts = dict(ROWS=16, BLOCK_D=128)
    kernel = sass_loop.compile_for_hopper(fn, sig, consts, num_warps=4, num_stages=1)
    registers, spilled = sass_loop.ptxas_usage(kernel)
    assert spilled == 0 and registers > 0
