"""The fast decode kernels (``hinge.layers.fast_triton``) and their wiring.

- Under Triton's CPU interpreter each kernel equals a float64 reference to one rounding, on tiny
  ragged shapes (M 1..16, N and K not multiples of the blocks), split-K and tensor-core tilings
  included.
- On CPU (and in deterministic mode) nothing changes: the fused-norm fallback, the MLP, the linear
  and a whole bf16 model give the same bits as the formulas they replaced.
- With the kernels forced on (interpreted), the model's logits stay within bf16 rounding.
- ``gpu`` tests compare each kernel with torch at the Qwen3-8B shapes and replay them in a CUDA graph.
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from triton_interpreter import counting, interpreter, load_interpreted  # noqa: F401 (fixture)

from hinge.layers import fast_triton
from hinge.layers.mlp import GatedMLP
from hinge.layers.norm import RMSNorm

#: |ours - float64| <= bound * max(1, max |reference|): one rounding of the result
BOUNDS = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
ROWS = [1, 2, 3, 5, 8, 13, 16]


def randn(*shape, seed, dtype=torch.float32, scale=1.0, device="cpu"):
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)


def assert_close_to(out, ref, dtype):
    err = float((out.double() - ref).abs().max())
    bound = BOUNDS[dtype] * max(1.0, float(ref.abs().max()))
    assert err <= bound, f"max error {err:.3g} > {bound:.3g}"


def rms_norm64(h: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    h = h.double()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.fixture(scope="module")
def interpreted():
    return types.SimpleNamespace(**{name: load_interpreted(f"layers/fast_triton/{name}.py")
                                    for name in ("gemv", "add_rmsnorm", "silu_mul", "qk_norm_rope",
                                                 "kv_write")})


# -- kernels under the interpreter ---------------------------------------------------------------


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", ROWS)
def test_gemv_equals_the_float64_product_for_ragged_rows_in_every_tiling(interpreted, dtype, m):
    g = interpreted.gemv
    x, w = randn(m, 200, seed=m, dtype=dtype), randn(37, 200, seed=100 + m, dtype=dtype)
    ref = x.double() @ w.double().T
    tilings = [None, g.GemvConfig(block_n=16, block_k=32, split_k=3, dot=True),
               g.GemvConfig(block_n=32, block_k=64, split_k=1, dot=True)]
    if m <= 4:
        tilings.append(g.GemvConfig(block_n=4, block_k=64, split_k=2, dot=False))
    for config in tilings:
        out = g.gemv(x, w, config)
        assert out.dtype == dtype and out.shape == (m, 37), config
        assert_close_to(out, ref, dtype)


@pytest.mark.usefixtures("interpreter")
def test_gemv_reads_x_with_a_row_stride(interpreted):
    big = randn(3, 300, seed=1, dtype=torch.bfloat16)
    x, w = big[:, 50:250], randn(40, 200, seed=2, dtype=torch.bfloat16)
    assert_close_to(interpreted.gemv.gemv(x, w), x.double() @ w.double().T, torch.bfloat16)


def test_gemv_supports_only_few_rows_of_one_half_dtype_and_a_contiguous_weight():
    from hinge.layers.fast_triton import gemv as g

    x, w = torch.zeros(4, 64, dtype=torch.bfloat16), torch.zeros(32, 64, dtype=torch.bfloat16)
    assert g.supports(x, w)
    assert not g.supports(torch.zeros(17, 64, dtype=torch.bfloat16), w)
    assert not g.supports(x[:0], w)
    assert not g.supports(x, w.to(torch.float16))
    assert not g.supports(x.float(), w.float())
    assert not g.supports(x, torch.zeros(64, 32, dtype=torch.bfloat16).T)
    with pytest.raises(ValueError, match="gemv.supports"):
        g.gemv(x.float(), w.float())


def test_gemv_default_config_splits_k_only_where_the_weight_has_few_row_tiles():
    from hinge.layers.fast_triton.gemv import default_config

    assert default_config(1, 24576, 4096).split_k == 1
    assert default_config(1, 4096, 4096).split_k >= 2
    assert default_config(1, 4096, 12288).split_k >= 2
    assert not default_config(1, 6144, 4096).dot and default_config(16, 6144, 4096).dot


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_add_rmsnorm_rounds_the_sum_like_torch_and_normalizes_it_like_float64(interpreted, dtype, offset):
    x, r = randn(5, 200, seed=3, dtype=dtype), randn(5, 200, seed=4, dtype=dtype, scale=3.0)
    weight = randn(200, seed=5, dtype=dtype, scale=0.1) + (0.0 if offset else 1.0)
    normed, residual = interpreted.add_rmsnorm.add_rmsnorm(x, r, weight, 1e-6, offset)
    if dtype == torch.bfloat16:  # the interpreter truncates float32 -> bf16 (the GPU rounds to nearest)
        assert bool(((residual.double() - (x + r).double()).abs() <= (x + r).double().abs() * 2.0 ** -7).all())
    else:
        assert torch.equal(residual, x + r)
    w = (weight + offset) if offset else weight  # the weight rounded as rmsnorm_reference forms it
    assert normed.dtype == dtype
    assert_close_to(normed, rms_norm64(x + r, w, 1e-6), dtype)


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_silu_mul_equals_the_float64_gate_times_up_across_column_blocks(interpreted, dtype):
    gate_up = randn(3, 2 * 1100, seed=6, dtype=dtype, scale=4.0)
    out = interpreted.silu_mul.silu_mul(gate_up)
    g, u = gate_up[:, :1100].double(), gate_up[:, 1100:].double()
    assert out.shape == (3, 1100) and out.dtype == dtype
    assert_close_to(out, F.silu(g) * u, dtype)


def rope64(x: torch.Tensor, positions: torch.Tensor, rot: int, theta: float = 10000.0) -> torch.Tensor:
    """Rotate-half rotary embedding of the first ``rot`` dims of each head, in float64."""
    inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    ang = positions.double()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2, rest = x[..., : rot // 2], x[..., rot // 2 : rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("factor, offset", [(1.0, 0.0), (0.5, 0.0), (0.25, 1.0)])
def test_qk_norm_rope_equals_float64_per_head_norm_then_rotation(interpreted, dtype, factor, offset):
    """``offset`` 1.0 with a quarter rotated: Qwen3.5's gated attention ((1 + w) norms)."""
    from hinge.layers.rotary import RotaryEmbedding

    t, hq, hk, d = 3, 4, 2, 24
    rotary = RotaryEmbedding(d, {"rope_theta": 10000.0, "rope_type": "default", "partial_rotary_factor": factor})
    qkv = randn(t, (hq + 2 * hk) * d, seed=15, dtype=dtype, scale=2.0)
    q, k = qkv[:, : hq * d].view(t, hq, d), qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    qw, kw = (randn(d, seed=s, dtype=dtype, scale=0.2) + 1 for s in (16, 17))
    positions = torch.tensor([0, 5, 77])
    cos, sin = rotary(positions, 100, dtype=dtype)
    if offset:
        qw, kw = qw - 1, kw - 1  # stored centred on zero
    out_q, out_k = interpreted.qk_norm_rope.qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin, offset)
    assert out_q.shape == q.shape and out_k.shape == k.shape and out_q.dtype == dtype
    assert out_q.is_contiguous() and out_k.is_contiguous()  # the attention backend copies nothing
    # float64 reference from the kernel's rounded norm (the contract's one intermediate rounding)
    for out, x, w in ((out_q, q, qw), (out_k, k, kw)):
        normed = rms_norm64(x, (w + offset).to(dtype), 1e-6).to(dtype).double()
        assert_close_to(out, rope64(normed, positions, rotary.rotary_dim), dtype)


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_qk_norm_rope_with_a_kv_target_also_stores_its_keys_and_the_values_in_their_slots_only(interpreted, dtype):
    from hinge.layers.rotary import RotaryEmbedding

    t, hq, hk, d = 3, 4, 2, 16
    rotary = RotaryEmbedding(d, {"rope_theta": 10000.0, "rope_type": "default"})
    qkv = randn(t, (hq + 2 * hk) * d, seed=18, dtype=dtype, scale=2.0)
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    v = qkv[:, (hq + hk) * d :].view(t, hk, d)  # views of the fused projection, as the model has
    qw, kw = (randn(d, seed=s, dtype=dtype, scale=0.2) + 1 for s in (19, 20))
    cos, sin = rotary(torch.tensor([0, 5, 77]), 100, dtype=dtype)
    k_cache, v_cache = (torch.full((10, hk, d), float("nan"), dtype=dtype) for _ in range(2))
    loc = torch.tensor([7, 2, 4])
    kernel = interpreted.qk_norm_rope
    want_q, want_k = kernel.qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin)
    out_q, out_k = kernel.qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin, kv_target=(v, k_cache, v_cache, loc))
    assert torch.equal(out_q, want_q) and torch.equal(out_k, want_k)  # the same bits as without
    assert torch.equal(k_cache[loc], out_k) and torch.equal(v_cache[loc], v)
    others = [i for i in range(10) if i not in loc.tolist()]
    assert k_cache[others].isnan().all() and v_cache[others].isnan().all()  # nothing else written
    with pytest.raises(ValueError, match="KV write takes v of k's shape.*hinge.layers.kv_write"):
        kernel.qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin, kv_target=(v, k_cache[:, :1], v_cache, loc))


# -- the selector and the CPU / deterministic paths ----------------------------------------------


def test_fast_kernels_are_enabled_only_for_cuda_and_in_deterministic_mode_only_if_invariant(monkeypatch):
    cuda_like = types.SimpleNamespace(is_cuda=True)
    monkeypatch.setattr(fast_triton, "triton_available", lambda: True)
    assert not fast_triton.enabled(torch.zeros(1))
    assert not fast_triton.enabled(torch.zeros(1), invariant=True)
    assert fast_triton.enabled(cuda_like)
    assert not fast_triton.enabled(cuda_like, deterministic=True)
    assert fast_triton.enabled(cuda_like, deterministic=True, invariant=True)
    monkeypatch.setenv("HINGE_FAST_KERNELS", "0")
    assert not fast_triton.enabled(cuda_like)
    assert not fast_triton.enabled(cuda_like, deterministic=True, invariant=True)
    monkeypatch.delenv("HINGE_FAST_KERNELS")
    monkeypatch.setattr(fast_triton, "triton_available", lambda: False)
    assert not fast_triton.enabled(cuda_like)


def test_the_gemv_is_off_unless_asked_for_because_cublas_was_faster_on_the_h200(monkeypatch):
    cuda_like = types.SimpleNamespace(is_cuda=True)
    monkeypatch.setattr(fast_triton, "triton_available", lambda: True)
    monkeypatch.delenv("HINGE_FAST_GEMV", raising=False)
    assert fast_triton.enabled(cuda_like) and not fast_triton.gemv_enabled(cuda_like)
    monkeypatch.setenv("HINGE_FAST_GEMV", "1")
    assert fast_triton.gemv_enabled(cuda_like)
    monkeypatch.setenv("HINGE_FAST_KERNELS", "0")
    assert not fast_triton.gemv_enabled(cuda_like)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_rmsnorm_with_a_residual_on_cpu_is_the_add_then_the_norm_bit_for_bit(deterministic, offset):
    norm = RMSNorm(200, 1e-6, dtype=torch.bfloat16, deterministic=deterministic, offset=offset)
    norm.weight.data = randn(200, seed=7, dtype=torch.bfloat16)
    x, r = randn(9, 200, seed=8, dtype=torch.bfloat16), randn(9, 200, seed=9, dtype=torch.bfloat16)
    normed, residual = norm(x, r)
    assert torch.equal(residual, r + x)
    assert torch.equal(normed, norm(r + x))


def test_gated_mlp_on_cpu_is_the_unfused_formula_bit_for_bit():
    from hinge.builtin.no_quant import NoQuantizer

    mlp = GatedMLP(64, 96, "silu", NoQuantizer(), torch.bfloat16, "mlp")
    for p in (mlp.gate_up_proj.weight, mlp.down_proj.weight):
        p.data = randn(*p.shape, seed=p.numel(), dtype=torch.bfloat16, scale=0.2)
    x = randn(5, 64, seed=10, dtype=torch.bfloat16)
    gu = F.linear(x, mlp.gate_up_proj.weight)
    assert torch.equal(mlp(x), F.linear(F.silu(gu[:, :96]) * gu[:, 96:], mlp.down_proj.weight))


def test_only_the_builtin_none_quantizer_in_default_mode_may_take_the_gemv():
    from hinge.builtin.no_quant import NoQuantizer
    from hinge.layers.linear import Linear

    class Subclass(NoQuantizer):
        pass

    plain = Linear(64, 32, False, NoQuantizer(), torch.bfloat16, "p")
    assert plain.plain
    assert not Linear(64, 32, False, NoQuantizer(build=types.SimpleNamespace(deterministic=True)),
                      torch.bfloat16, "d").plain
    assert not Linear(64, 32, False, Subclass(), torch.bfloat16, "s").plain
    plain.weight.data = randn(32, 64, seed=11, dtype=torch.bfloat16)
    x = randn(3, 64, seed=12, dtype=torch.bfloat16)
    assert torch.equal(plain(x), F.linear(x, plain.weight))


def old_decoder_layer_forward(self, h, cos, sin, ctx, residual=None):
    """``DecoderLayer.forward`` before the residual passing: two unfused adds (a zero residual
    handed on, so the stack's ``out + residual`` is ``out``)."""
    h = h if residual is None else h + residual
    h = h + self.self_attn(self.input_layernorm(h), cos, sin, ctx)
    out = h + self.mlp(self.post_attention_layernorm(h))
    return out, torch.zeros_like(out)


def bf16_model(path):
    from hinge.builtin.no_quant import NoQuantizer
    from hinge.models.loader import load_model
    from hinge.plugins.specs import BuildContext

    build = BuildContext(device="cpu", dtype=torch.bfloat16, deterministic=False, page_size=16)
    model = load_model(path, device="cpu", dtype=torch.bfloat16, quantizer=NoQuantizer(None, build),
                       progress=False)
    return model, build


def prefill_and_decode(model, build, ids, decode_steps=3):
    from hinge.builtin.torch_attention import TorchAttentionBackend
    from hinge.testing.paged_steps import PagedSteps

    steps = PagedSteps(model, TorchAttentionBackend(None, build))
    out = [steps.step([("a", ids[:-decode_steps]), ("b", ids[3:9])]).logits]
    out += [steps.step([("a", [tok]), ("b", [tok])]).logits for tok in ids[-decode_steps:]]
    return torch.cat(out)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from hinge.testing.checkpoints import tiny_checkpoints

    return tiny_checkpoints(tmp_path_factory.mktemp)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_decoder_layer_residual_passing_keeps_cpu_bf16_logits_bit_identical(arch, tiny, monkeypatch):
    from hinge.models.dense import DecoderLayer

    torch.set_num_threads(1)
    model, build = bf16_model(tiny(arch))
    ids = [int(t) for t in torch.randint(0, 256, (24,), generator=torch.Generator().manual_seed(13))]
    ours = prefill_and_decode(model, build, ids)
    monkeypatch.setattr(DecoderLayer, "forward", old_decoder_layer_forward)
    before = prefill_and_decode(model, build, ids)
    assert torch.equal(ours, before)


@pytest.mark.usefixtures("interpreter")
def test_a_model_with_the_interpreted_fast_kernels_forced_on_stays_within_bf16_of_the_plain_path(
        tiny, interpreted, monkeypatch):
    """The wiring: norm, MLP, q/k norm + rope, linears and the KV write call the kernels
    (counted) with the right operands."""
    torch.set_num_threads(1)
    model, build = bf16_model(tiny("qwen3"))
    ids = [int(t) for t in torch.randint(0, 256, (14,), generator=torch.Generator().manual_seed(14))]
    plain = prefill_and_decode(model, build, ids, decode_steps=2)
    calls = {"gemv": 0, "add_rmsnorm": 0, "silu_mul": 0, "qk_norm_rope": 0, "kv_write": 0}

    def counted(module, name):
        return counting(module, name, calls)

    fake = types.SimpleNamespace(gemv=counted(interpreted.gemv, "gemv"),
                                 add_rmsnorm=counted(interpreted.add_rmsnorm, "add_rmsnorm"),
                                 silu_mul=counted(interpreted.silu_mul, "silu_mul"),
                                 qk_norm_rope=counted(interpreted.qk_norm_rope, "qk_norm_rope"),
                                 kv_write=counted(interpreted.kv_write, "kv_write"))
    monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False:
                        invariant or not deterministic)
    monkeypatch.setenv("HINGE_FAST_GEMV", "1")
    # the separate KV write's wiring (the rope kernel's: the test below)
    monkeypatch.setenv("HINGE_ROPE_KV_WRITE", "0")
    monkeypatch.setattr(fast_triton, "kernels", lambda: fake)
    fast = prefill_and_decode(model, build, ids, decode_steps=2)
    layers = len(model.model.layers)
    steps = 3  # one prefill of 12 + 6 rows (too many for the GEMV), two decodes of 2 rows
    assert calls["silu_mul"] == calls["qk_norm_rope"] == calls["kv_write"] == layers * steps
    # two per layer: the first layer's input norm has no residual, the final norm takes the last
    assert calls["add_rmsnorm"] == 2 * layers * steps
    assert calls["gemv"] == 4 * layers * (steps - 1)  # qkv, o, gate_up, down per decode step
    assert not torch.equal(fast, plain)  # the kernels ran (one rounding fewer in silu_mul)
    err = (fast - plain).abs().max() / plain.abs().max()
    assert err < 0.05, f"relative logit difference {err:.3g}"


@pytest.mark.usefixtures("interpreter")
def test_the_rope_kernel_writing_the_kv_gives_the_bits_of_the_kv_write_and_launches_it_no_more(
        tiny, interpreted, monkeypatch):
    """By default (HINGE_ROPE_KV_WRITE=0 turns it off), over a backend claiming
    kv_written_by_layer (torch): q/k norm + rope stores the step's KV, the KV write is never
    called, and the logits keep their bits (the pool holds the same values, which the backend
    reads); over a backend that does not claim it, the KV write runs as before."""
    from hinge.builtin.torch_attention import TorchAttentionBackend

    torch.set_num_threads(1)
    model, build = bf16_model(tiny("qwen3"))
    ids = [int(t) for t in torch.randint(0, 256, (14,), generator=torch.Generator().manual_seed(15))]
    calls = {"qk_norm_rope": 0, "kv_write": 0}
    fake = types.SimpleNamespace(qk_norm_rope=counting(interpreted.qk_norm_rope, "qk_norm_rope", calls),
                                 kv_write=counting(interpreted.kv_write, "kv_write", calls),
                                 add_rmsnorm=interpreted.add_rmsnorm, silu_mul=interpreted.silu_mul)
    monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False:
                        invariant or not deterministic)
    monkeypatch.setattr(fast_triton, "kernels", lambda: fake)
    monkeypatch.setenv("HINGE_ROPE_KV_WRITE", "0")
    separate = prefill_and_decode(model, build, ids, decode_steps=2)
    assert calls["kv_write"] == calls["qk_norm_rope"] > 0
    monkeypatch.delenv("HINGE_ROPE_KV_WRITE")  # the default: the rope kernel writes the KV
    calls.update(qk_norm_rope=0, kv_write=0)
    fused = prefill_and_decode(model, build, ids, decode_steps=2)
    assert calls["kv_write"] == 0 and calls["qk_norm_rope"] > 0
    assert torch.equal(fused, separate)
    caps = TorchAttentionBackend.capabilities.model_copy(update={"kv_written_by_layer": False})
    monkeypatch.setattr(TorchAttentionBackend, "capabilities", caps)
    calls.update(qk_norm_rope=0, kv_write=0)
    assert torch.equal(prefill_and_decode(model, build, ids, decode_steps=2), separate)
    assert calls["kv_write"] == calls["qk_norm_rope"] > 0


# -- CUDA ----------------------------------------------------------------------------------------

gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
#: Qwen3-8B linears: fused qkv, o, fused gate|up, down
WEIGHTS = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (1000, 200)]


@pytest.mark.parametrize("n,k", WEIGHTS)
@pytest.mark.parametrize("m", [1, 2, 4, 16])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gemv_matches_the_float64_product_and_repeats_its_bits(m, n, k):
    from hinge.layers.fast_triton import gemv as g

    w = randn(n, k, seed=1, dtype=torch.bfloat16, scale=k ** -0.5, device="cuda")
    x = randn(m, k, seed=2, dtype=torch.bfloat16, device="cuda")
    out = g.gemv(x, w)
    assert_close_to(out, x.double() @ w.double().T, torch.bfloat16)
    torch_err = float((torch.matmul(x, w.T).double() - x.double() @ w.double().T).abs().max())
    assert float((out.double() - x.double() @ w.double().T).abs().max()) <= 2 * torch_err + 1e-6
    assert torch.equal(out, g.gemv(x, w))


@pytest.mark.parametrize("m", [1, 64])
@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_add_rmsnorm_matches_torch_add_then_rms_norm(m, offset):
    from hinge.layers import batch_invariant
    from hinge.layers.fast_triton.add_rmsnorm import add_rmsnorm

    x, r = (randn(m, 4096, seed=s, dtype=torch.bfloat16, device="cuda") for s in (3, 4))
    weight = randn(4096, seed=5, dtype=torch.bfloat16, scale=0.1, device="cuda") + (0.0 if offset else 1.0)
    normed, residual = add_rmsnorm(x, r, weight, 1e-6, offset)
    assert torch.equal(residual, x + r)
    ref = batch_invariant.rmsnorm_reference(x + r, weight, 1e-6, offset)
    ulp = (ref.float().abs() * 2.0 ** -7).clamp_min(1e-30)
    assert bool(((normed.float() - ref.float()).abs() <= ulp).all()), "more than one bf16 ulp from F.rms_norm"


@pytest.mark.parametrize("m", [1, 64])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_silu_mul_matches_the_float64_formula_and_torch_to_one_ulp(m):
    from hinge.layers.fast_triton.silu_mul import silu_mul

    gate_up = randn(m, 2 * 12288, seed=6, dtype=torch.bfloat16, scale=3.0, device="cuda")
    out = silu_mul(gate_up)
    g, u = gate_up[:, :12288], gate_up[:, 12288:]
    assert_close_to(out, F.silu(g.double()) * u.double(), torch.bfloat16)
    ref = F.silu(g) * u
    assert bool(((out.float() - ref.float()).abs() <= ref.float().abs() * 2.0 ** -7 + 1e-30).all())


@pytest.mark.parametrize("t", [1, 64])
@pytest.mark.parametrize("d, factor, offset", [(128, 1.0, 0.0), (256, 0.25, 1.0)])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_qk_norm_rope_matches_the_norms_then_apply_qk(t, d, factor, offset):
    """Qwen3-8B heads, and Qwen3.5's gated attention ((1 + w) norms, a quarter rotated, head 256)."""
    from hinge.layers.fast_triton.qk_norm_rope import qk_norm_rope
    from hinge.layers.rotary import RotaryEmbedding

    dt = torch.bfloat16
    rotary = RotaryEmbedding(d, {"rope_theta": 1000000.0, "rope_type": "default",
                                 "partial_rotary_factor": factor})
    qkv = randn(t, 48 * d, seed=18, dtype=dt, device="cuda")
    q, k = qkv[:, : 32 * d].view(t, 32, d), qkv[:, 32 * d : 40 * d].view(t, 8, d)
    qw, kw = (randn(d, seed=s, dtype=dt, scale=0.2, device="cuda") + 1 - offset for s in (19, 20))
    positions = torch.arange(t, device="cuda") * 37
    cos, sin = rotary(positions, 37 * t, dtype=dt)
    out_q, out_k = qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin, offset)
    ref_q, ref_k = rotary.apply_qk(F.rms_norm(q, (d,), qw + offset, 1e-6),
                                   F.rms_norm(k, (d,), kw + offset, 1e-6), cos, sin)
    for out, ref in ((out_q, ref_q), (out_k, ref_k)):
        assert_close_to(out, ref.double(), dt)


@pytest.mark.parametrize("t", [1, 16])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_qk_norm_rope_with_a_kv_target_stores_the_kv_writes_bits_eager_and_in_a_graph(t):
    """Qwen3-8B heads: the fused KV write leaves the pool as qk_norm_rope then kv_write do, and
    writes no other slot, eagerly and over graph replays with new inputs and slots."""
    from hinge.layers.fast_triton.kv_write import kv_write
    from hinge.layers.fast_triton.qk_norm_rope import qk_norm_rope
    from hinge.layers.rotary import RotaryEmbedding

    dt, d, slots = torch.bfloat16, 128, 4096
    rotary = RotaryEmbedding(d, {"rope_theta": 1000000.0, "rope_type": "default"})
    qkv = randn(t, 48 * d, seed=21, dtype=dt, device="cuda")
    q, k, v = qkv[:, : 32 * d].view(t, 32, d), qkv[:, 32 * d : 40 * d].view(t, 8, d), qkv[:, 40 * d :].view(t, 8, d)
    qw, kw = (randn(d, seed=s, dtype=dt, scale=0.2, device="cuda") + 1 for s in (22, 23))
    cos, sin = rotary(torch.arange(t, device="cuda") * 37, 37 * t + 1, dtype=dt)
    loc = torch.randperm(slots, device="cuda")[:t]
    pools = [torch.full((slots, 8, d), float("nan"), dtype=dt, device="cuda") for _ in range(4)]

    def both():
        fused = qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin, kv_target=(v, pools[0], pools[1], loc))
        separate = qk_norm_rope(q, k, qw, kw, 1e-6, cos, sin)
        kv_write(pools[2], pools[3], loc, separate[1], v)
        return fused, separate

    def check(fused, separate):
        assert all(torch.equal(a, b) for a, b in zip(fused, separate, strict=True))
        for mine, theirs in ((pools[0], pools[2]), (pools[1], pools[3])):
            assert torch.equal(mine.nan_to_num(7.0), theirs.nan_to_num(7.0))

    check(*both())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = both()
    for seed in (24, 25):
        qkv.copy_(randn(t, 48 * d, seed=seed, dtype=dt, device="cuda"))
        loc.copy_(torch.randperm(slots, device="cuda")[:t])
        graph.replay()
        torch.cuda.synchronize()
        check(*outs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fast_kernels_replay_in_a_cuda_graph_with_new_inputs():
    from hinge.layers.fast_triton.add_rmsnorm import add_rmsnorm
    from hinge.layers.fast_triton.gemv import gemv
    from hinge.layers.fast_triton.qk_norm_rope import qk_norm_rope
    from hinge.layers.fast_triton.silu_mul import silu_mul

    dt = torch.bfloat16
    w_qkv = randn(6144, 4096, seed=1, dtype=dt, scale=4096 ** -0.5, device="cuda")  # no split-K
    w_o = randn(4096, 4096, seed=2, dtype=dt, scale=4096 ** -0.5, device="cuda")  # split-K
    norm_w = randn(4096, seed=3, dtype=dt, device="cuda")
    x, r = randn(4, 4096, seed=4, dtype=dt, device="cuda"), randn(4, 4096, seed=5, dtype=dt, device="cuda")

    cos, sin = torch.rand(4, 1, 128, device="cuda").to(dt), torch.rand(4, 1, 128, device="cuda").to(dt)
    head_w = randn(128, seed=8, dtype=dt, device="cuda")

    def step():
        h, res = add_rmsnorm(x, r, norm_w, 1e-6)
        qkv = gemv(h, w_qkv)
        q, k = qk_norm_rope(qkv[:, :4096].view(4, 32, 128), qkv[:, 4096:5120].view(4, 8, 128),
                            head_w, head_w, 1e-6, cos, sin)
        return gemv(silu_mul(q.reshape(4, 4096).repeat(1, 2)), w_o), torch.cat([res, k.reshape(4, -1)], 1)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, res = step()
    for seed in (6, 7):
        x.copy_(randn(4, 4096, seed=seed, dtype=dt, device="cuda"))
        graph.replay()
        eager_out, eager_res = step()
        assert torch.equal(out, eager_out) and torch.equal(res, eager_res)
