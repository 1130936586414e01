"""``hinge.layers.kv_write``: the one KV-pool write of every attention backend.

- Under Triton's interpreter the one-launch kernel leaves the caches exactly as two
  ``index_copy_`` calls do (bit for bit: it is a copy), for key/value views of a fused qkv
  projection, widths that are not a power of two or wider than one block, and no tokens.
- ``write_kv`` takes the kernel only where it applies (CUDA, one dtype, unit last strides,
  contiguous caches) and ``index_copy_`` (with the cast) everywhere else.
- ``gpu``: the kernel on CUDA at Qwen3-8B's KV shape, eager and in a CUDA graph.
"""

from __future__ import annotations

import types

import pytest
import torch
from triton_interpreter import interpreter, load_interpreted  # noqa: F401 (fixture)

from hinge.forward import KVCache
from hinge.layers import fast_triton
from hinge.layers.kv_write import write_kv


def fused_kv(tokens, heads, dim, dtype, seed, device="cpu"):
    """k and v as the strided views attention layers pass: slices of one (T, (Hq + 2 Hk) D)
    projection."""
    gen = torch.Generator(device=device).manual_seed(seed)
    qkv = torch.randn(tokens, (2 * heads + 2 * heads) * dim, generator=gen, device=device).to(dtype)
    k = qkv[:, 2 * heads * dim: 3 * heads * dim].view(tokens, heads, dim)
    v = qkv[:, 3 * heads * dim:].view(tokens, heads, dim)
    return k, v


def pools(slots, heads, dim, dtype, device="cpu"):
    return (torch.full((slots, heads, dim), float("nan"), device=device).to(dtype),
            torch.full((slots, heads, dim), float("nan"), device=device).to(dtype))


def reference(k_cache, v_cache, loc, k, v):
    kc, vc = k_cache.clone(), v_cache.clone()
    kc.index_copy_(0, loc, k.to(kc.dtype))
    vc.index_copy_(0, loc, v.to(vc.dtype))
    return kc, vc


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("tokens,heads,dim", [(5, 2, 16), (3, 3, 48), (4, 12, 128), (0, 2, 16)])
def test_the_kernel_leaves_the_caches_as_two_index_copies_do(dtype, tokens, heads, dim):
    kernel = load_interpreted("layers/fast_triton/kv_write.py")
    k, v = fused_kv(tokens, heads, dim, dtype, seed=tokens + heads)
    assert k.stride(-1) == 1 and (tokens == 0 or not k.is_contiguous()), "a fused projection's views"
    k_cache, v_cache = pools(40, heads, dim, dtype)
    loc = torch.randperm(39)[:tokens] + 1
    want_k, want_v = reference(k_cache, v_cache, loc, k, v)
    assert kernel.supports(k_cache, v_cache, loc, k, v)
    kernel.kv_write(k_cache, v_cache, loc, k, v)
    # NaN-filled slots nobody wrote stay NaN in both: compare the bits, NaN included
    assert torch.equal(k_cache.view(torch.uint8), want_k.view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), want_v.view(torch.uint8))


def test_the_kernel_refuses_what_it_cannot_copy_and_says_what_to_use():
    kernel = load_interpreted("layers/fast_triton/kv_write.py")
    k, v = fused_kv(3, 2, 16, torch.bfloat16, seed=1)
    k_cache, v_cache = pools(8, 2, 16, torch.bfloat16)
    loc = torch.tensor([1, 2, 3])
    assert not kernel.supports(*pools(8, 2, 16, torch.float32), loc, k, v), "a cast"
    assert not kernel.supports(k_cache[:, :, :8], v_cache[:, :, :8], loc, k[..., :8], v[..., :8])
    assert not kernel.supports(k_cache, v_cache, loc[:2], k, v), "one slot per token"
    assert not kernel.supports(k_cache, v_cache, loc.float(), k, v)
    with pytest.raises(ValueError, match="use index_copy_ instead"):
        kernel.kv_write(*pools(8, 2, 16, torch.float32), loc, k, v)


def write_through(monkeypatch, use_kernel: bool, k_cache, v_cache, loc, k, v):
    """``write_kv`` with ``fast_triton`` said on (its kernel counted) or off; returns the count."""
    calls = {"kv_write": 0}
    kernel = load_interpreted("layers/fast_triton/kv_write.py")

    def counted(*args):
        calls["kv_write"] += 1
        return kernel.kv_write(*args)

    fake = types.SimpleNamespace(kv_write=types.SimpleNamespace(supports=kernel.supports, kv_write=counted))
    monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False: use_kernel)
    monkeypatch.setattr(fast_triton, "kernels", lambda: fake)
    write_kv(KVCache(k=[k_cache], v=[v_cache], page_size=4), 0, loc, k, v)
    return calls["kv_write"]


@pytest.mark.usefixtures("interpreter")
def test_write_kv_takes_the_kernel_only_where_it_applies_and_copies_with_torch_elsewhere(monkeypatch):
    k, v = fused_kv(3, 2, 16, torch.bfloat16, seed=2)
    loc = torch.tensor([5, 1, 7])
    for on, dtype, launches in ((True, torch.bfloat16, 1), (True, torch.float32, 0),
                                (False, torch.bfloat16, 0)):
        k_cache, v_cache = pools(8, 2, 16, dtype)
        want_k, want_v = reference(k_cache, v_cache, loc, k, v)
        assert write_through(monkeypatch, on, k_cache, v_cache, loc, k, v) == launches, (on, dtype)
        assert torch.equal(k_cache[loc], want_k[loc]) and torch.equal(v_cache[loc], want_v[loc])
        assert torch.isnan(k_cache[0].float()).all(), "an unwritten slot is untouched"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("tokens", [1, 64, 8192])
def test_on_cuda_the_kernel_equals_index_copy_eager_and_in_a_graph(tokens):
    from hinge.layers.fast_triton import kv_write as kernel

    k, v = fused_kv(tokens, 8, 128, torch.bfloat16, seed=tokens, device="cuda")  # Qwen3-8B's KV
    k_cache, v_cache = pools(tokens + 129, 8, 128, torch.bfloat16, device="cuda")
    loc = torch.randperm(tokens + 128, device="cuda")[:tokens] + 1
    want_k, want_v = reference(k_cache, v_cache, loc, k, v)
    kernel.kv_write(k_cache, v_cache, loc, k, v)
    assert torch.equal(k_cache[loc], want_k[loc]) and torch.equal(v_cache[loc], want_v[loc])
    k_cache.zero_(), v_cache.zero_()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kernel.kv_write(k_cache, v_cache, loc, k, v)  # compile outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    k_cache.zero_(), v_cache.zero_()
    with torch.cuda.graph(graph):
        kernel.kv_write(k_cache, v_cache, loc, k, v)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(k_cache[loc], want_k[loc]) and torch.equal(v_cache[loc], want_v[loc])


def test_the_kernel_compiles_for_the_h200_with_16_byte_copies():
    """sm_90 with Triton's own ptxas (no GPU needed): what the interpreter accepts, the compiler
    must too; the head-sized runs of a token's keys move as 16-byte vectors."""
    pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from hinge.layers.fast_triton.kv_write import _kv_write_kernel

    pointers = dict(k_ptr="*bf16", v_ptr="*bf16", kc_ptr="*bf16", vc_ptr="*bf16", loc_ptr="*i64")
    ints = dict(stride_kt="i32", stride_kh="i32", stride_vt="i32", stride_vh="i32", width="i32")
    names = _kv_write_kernel.arg_names
    aligned = [*pointers, *ints]  # a launch specializes these as multiples of 16 (Qwen3-8B: all are)
    src = ASTSource(fn=_kv_write_kernel, signature={**pointers, **ints, "D": "constexpr", "BLOCK": "constexpr"},
                    constexprs={"D": 128, "BLOCK": 1024},
                    attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    assert "ld.global.v4.b32" in ptx or "ld.global.v4.u32" in ptx, "keys not loaded 16 bytes at a time"
    assert "st.global.v4.b32" in ptx or "st.global.v4.u32" in ptx
