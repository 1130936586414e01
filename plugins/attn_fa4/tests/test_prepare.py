"""The split layer's fused copies (``hinge_fa4.prepare_triton``) under Triton's interpreter: the
KV pool and the expanded queries are the bits ``write_kv`` and ``expand_queries`` give, for views
of a fused qkv projection, GQA, any slot count; and a split decode on CPU takes that kernel when
fast kernels are on (forced here) with the attention's output unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_backend import LAYER, backend

import hinge_fa4
from hinge.forward import KVCache
from hinge.layers import fast_triton
from hinge.layers.fast_triton import kv_write  # noqa: F401 (compiled, before any interpreter)
from hinge.layers.kv_write import write_kv
from hinge.testing.batches import PAGE_TAIL_FILL, build_batch
from hinge_fa4.split import expand_queries

pytest.importorskip("triton")
KERNEL = Path(hinge_fa4.__file__).parent / "prepare_triton.py"


@pytest.fixture
def prepare(monkeypatch):
    """The interpreted module, the KV copy it inlines from an interpreted ``kv_write`` (the
    compiled ``kv_write`` is imported first, at module import, so that it stays compiled)."""
    from hinge.testing.triton_interpreter import load_interpreted, patch_interpreter

    patch_interpreter(monkeypatch)
    module = load_interpreted(KERNEL, "_interpreted_hinge_fa4_prepare_triton")
    kv_file = Path(fast_triton.__file__).parent / "kv_write.py"
    monkeypatch.setattr(module, "kv_copy", load_interpreted(kv_file, "_interpreted_fa4_kv_write"))
    return module


def qkv_views(tokens, heads, kv_heads, dim, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(dtype)
    q = qkv[:, : heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim: (heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    v = qkv[:, (heads + kv_heads) * dim:].view(tokens, kv_heads, dim)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("tokens, heads, kv_heads, dim, slots", [
    (3, 8, 2, 16, 5), (1, 32, 8, 128, 9), (4, 4, 4, 48, 1), (0, 8, 2, 16, 3)])
def test_the_fused_copies_are_the_bits_of_write_kv_and_expand_queries(prepare, dtype, tokens, heads,
                                                                      kv_heads, dim, slots):
    q, k, v = qkv_views(tokens, heads, kv_heads, dim, dtype, seed=tokens + slots)
    caches = [torch.full((40, kv_heads, dim), float("nan")).to(dtype) for _ in range(2)]
    want_caches = [c.clone() for c in caches]
    loc = torch.randperm(39)[:tokens] + 1
    write_kv(KVCache(k=[want_caches[0]], v=[want_caches[1]], page_size=4), 0, loc, k, v)
    assert prepare.supports(q, k, v, *caches, loc)
    rows = prepare.write_kv_and_expand(q, k, v, *caches, loc, slots)
    assert torch.equal(rows, expand_queries(q, slots))
    for got, want in zip(caches, want_caches, strict=True):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), "NaN slots untouched too"


def test_without_the_kv_write_the_prepare_kernel_expands_the_queries_and_leaves_the_pool(prepare):
    q, k, v = qkv_views(3, 8, 2, 16, torch.bfloat16, seed=7)
    caches = [torch.full((40, 2, 16), float("nan")).to(torch.bfloat16) for _ in range(2)]
    rows = prepare.write_kv_and_expand(q, k, v, *caches, torch.tensor([5, 9, 2]), 4, write_kv=False)
    assert torch.equal(rows, expand_queries(q, 4))
    assert all(c.isnan().all() for c in caches)  # the layer wrote (here: nobody did)


def test_the_fused_copies_refuse_a_cast_and_name_the_two_calls_instead(prepare):
    q, k, v = qkv_views(2, 8, 2, 16, torch.bfloat16, seed=1)
    caches = [torch.zeros(8, 2, 16) for _ in range(2)]  # float32 pool: a cast
    loc = torch.tensor([1, 2])
    assert not prepare.supports(q, k, v, *caches, loc)
    with pytest.raises(ValueError, match="use write_kv and expand_queries instead"):
        prepare.write_kv_and_expand(q, k, v, *caches, loc, 3)


def test_a_split_decode_with_fast_kernels_on_takes_the_fused_copies_and_attends_the_same(
        prepare, monkeypatch):
    calls = []

    def counted(*args, write_kv=True):
        calls.append(args[-1])
        assert write_kv
        return prepare.write_kv_and_expand(*args)

    fused = type("Fused", (), {"supports": staticmethod(prepare.supports),
                               "write_kv_and_expand": staticmethod(counted)})
    outs = []
    for on in (False, True):
        case = build_batch([300, 17, 64], [1, 1, 1], layer=LAYER, page_size=16, dtype=torch.float32,
                           phase="decode", page_tail_fill=PAGE_TAIL_FILL)
        attn = backend(dtype=torch.float32, split_kv="always", split_size=32, max_splits=4)
        monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False,
                            on=on: on)
        monkeypatch.setattr(type(attn), "_prepare", staticmethod(lambda: fused))
        case.batch.attn_metadata = attn.prepare_metadata(case.batch)
        outs.append((attn.forward(case.q, case.k, case.v, case.layer, case.kv, case.batch),
                     case.kv.k[0].clone(), case.kv.v[0].clone()))
    assert calls == [case.batch.attn_metadata.split.num_slots], "taken once, when on"
    for a, b in zip(outs[0], outs[1], strict=True):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def test_the_fused_copies_compile_for_the_h200():
    """sm_90 with Triton's own ptxas (no GPU needed): what the interpreter runs, the compiler
    takes, with 16-byte vector copies at Qwen3-8B's head sizes."""
    pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from hinge_fa4.prepare_triton import _prepare_kernel

    pointers = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", kc_ptr="*bf16", vc_ptr="*bf16",
                    loc_ptr="*i64", qx_ptr="*bf16")
    ints = dict.fromkeys(("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt",
                          "stride_vh", "q_width", "kv_width", "num_slots"), "i32")
    names = _prepare_kernel.arg_names
    aligned = [n for n in (*pointers, *ints) if n != "num_slots"]
    src = ASTSource(fn=_prepare_kernel, signature={**pointers, **ints, "D": "constexpr", "BLOCK": "constexpr"},
                    constexprs={"D": 128, "BLOCK": 1024},
                    attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    assert "st.global.v4.b32" in ptx


def test_warmup_compiles_the_fused_copies_when_fast_kernels_are_on(prepare, monkeypatch):
    from hinge.contracts import AttentionLayer

    seen = []

    def counted(*args):
        seen.append(tuple(args[0].shape))
        return prepare.write_kv_and_expand(*args)

    fused = type("Fused", (), {"supports": staticmethod(prepare.supports),
                               "write_kv_and_expand": staticmethod(counted)})
    attn = backend(dtype=torch.float32)
    monkeypatch.setattr(fast_triton, "enabled", lambda x, deterministic=False, invariant=False: True)
    monkeypatch.setattr(type(attn), "_prepare", staticmethod(lambda: fused))
    layer = AttentionLayer(0, 8, 2, 16, 0.25)
    case = build_batch([0], [1], layer=layer, page_size=16, dtype=torch.float32,
                       page_tail_fill=PAGE_TAIL_FILL)
    attn.warmup([layer], case.kv)
    assert seen == [(1, 8, 16)], "one query row, the layer's heads"
