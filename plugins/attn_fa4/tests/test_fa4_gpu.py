"""fa4 on a CUDA GPU (written for the H200; run on H100s, docs/gpu-results.md): the real
flash_attn.cute kernel against its torch restatement over random paged layouts, the split call in
both query forms, the Triton merge, the kernels one split layer launches, the split decode
through the kit's contract and under graph capture, bits of a request alone vs batched, warm-up
filling the on-disk JIT cache, and tiny dense and hybrid models generating with fa4 what they
generate with flashinfer.

The whole attention contract on the real kernel runs from test_fa4_contract.py (``TestFA4``).
Results go to docs/gpu-results.md; ``OUT`` set: the end-to-end logit gaps go to
``$OUT/fa4_end_to_end.json``.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from hinge.contracts import AttentionLayer
from hinge.plugins import BuildContext
from hinge.testing import AttentionBackendContract
from hinge.testing.batches import PAGE_TAIL_FILL, build_batch
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer
from hinge_fa4.options import FA4Options
from hinge_fa4.plugin import FA4_SPEC

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hinge.plugins.availability import probe_machine, unavailable_reason  # noqa: E402

_REASON = unavailable_reason(FA4_SPEC, probe_machine("cuda"))
if _REASON:
    pytest.skip(f"fa4 cannot run here: {_REASON}", allow_module_level=True)

from hinge_fa4.backend import FA4AttentionBackend  # noqa: E402
from hinge_fa4.kernel import FA4Kernel  # noqa: E402
from hinge_fa4.reference_kernel import ReferenceKernel  # noqa: E402

PAGE = 128
BF16 = torch.bfloat16
LONG_DECODE_STEPS = [([700, 40, 300, 1500], [1] * 4), ([260, 2, 1029], [1] * 3), ([128], [1]),
                     ([255, 900], [1, 1])]


def layer(head_dim=128, heads=32, kv_heads=8, **kw):
    return AttentionLayer(kv_layer_id=0, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                          scale=head_dim ** -0.5, **kw)


def backend(**options):
    build = BuildContext(device="cuda", dtype=BF16, deterministic=False, page_size=PAGE)
    return FA4AttentionBackend(FA4Options(**options), build)


class TestFA4SplitDecode(AttentionBackendContract):
    """The contract with every decode split into 128-key chunks (at most 2; the rest in tails)."""

    @pytest.fixture
    def spec(self):
        return FA4_SPEC

    @pytest.fixture
    def options(self):
        return {"split_kv": "always", "split_size": 128, "max_splits": 2}


# -- the kernel against its restatement ------------------------------------------------------------

CASES = {  # name: (prefix lens, extend lens)
    "prefill": ([0, 0, 0], [5, 300, 1030]),
    "prefix-extend": ([128, 7, 900], [40, 129, 3]),
    "decode": ([1, 127, 128, 2000], [1, 1, 1, 1]),
    "mixed": ([300, 0, 33, 5], [1, 200, 1, 70]),
    "verify": ([5, 260, 1000], [4, 4, 4]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("head_dim", sorted(FA4_SPEC.capabilities.head_dims))
@pytest.mark.parametrize("extra", [{}, {"sliding_window": 100}, {"logit_softcap": 20.0}],
                         ids=["plain", "window", "softcap"])
def test_the_kernel_matches_its_restatement(case, head_dim, extra):
    """One unsplit call of the real kernel vs the torch restatement on the same bf16 tensors."""
    lay = layer(head_dim, **extra)
    prefix, extend = CASES[case]
    c = build_batch(prefix, extend, layer=lay, page_size=PAGE, dtype=BF16, device="cuda",
                    page_tail_fill=PAGE_TAIL_FILL)
    attn = backend(split_kv="never")
    c.batch.attn_metadata = attn.prepare_metadata(c.batch)
    ours = attn.forward(c.q, c.k, c.v, lay, c.kv, c.batch).float()
    attn.kernel = ReferenceKernel()
    want = attn.forward(c.q, c.k, c.v, lay, c.kv, c.batch).float()
    err = float((ours - want).abs().max())
    assert err <= 3e-2, f"{case}, head_dim {head_dim}, {extra}: max |fa4 - restatement| = {err:.3g}"


def test_lse_and_requests_without_keys_match_the_restatement():
    """What the split merge relies on: natural-log lse, and a virtual request with no keys
    (an unused chunk slot of a captured split graph) gives zeros and lse -inf."""
    lay = layer(128)
    c = build_batch([300, 0], [1, 1], layer=lay, page_size=PAGE, dtype=BF16, device="cuda",
                    page_tail_fill=PAGE_TAIL_FILL)
    for pool in (c.kv.k[0], c.kv.v[0]):  # seqused_k 300: slot 300 (never written) is a page tail
        pool.nan_to_num_(nan=PAGE_TAIL_FILL)
    kv_k = c.kv.k[0].view(-1, PAGE, 8, 128)
    kv_v = c.kv.v[0].view(-1, PAGE, 8, 128)
    args = dict(cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32, device="cuda"),
                seqused_k=torch.tensor([300, 0], dtype=torch.int32, device="cuda"),
                page_table=c.batch.page_table.to(torch.int32).contiguous(), max_seqlen_q=1,
                softmax_scale=lay.scale, causal=False, return_lse=True)
    real = FA4Kernel(FA4Options(), torch.device("cuda"))
    out, lse = real.varlen(c.q, kv_k, kv_v, **args)
    ref_out, ref_lse = ReferenceKernel().varlen(c.q, kv_k, kv_v, **args)
    assert float((out[0].float() - ref_out[0].float()).abs().max()) <= 3e-2
    assert float((lse[:, 0] - ref_lse[:, 0]).abs().max()) <= 2e-2, "lse is natural log"
    assert torch.equal(out[1], torch.zeros_like(out[1])), "a request with no keys writes zeros"
    assert bool((lse[:, 1] == float("-inf")).all()), "and lse -inf"


# -- the split call and its merge ------------------------------------------------------------------


@pytest.mark.parametrize("split_call, tile_m, tile_n, pack_gqa, overlap, rs", [
    ("batched", 128, 128, True, True, True), ("varlen", 128, 128, True, True, True),
    ("batched", 64, 128, True, True, True), ("batched", 64, 128, False, True, True),
    ("batched", 64, 64, True, True, True), ("varlen", 128, 128, False, True, True),
    ("batched", 64, 128, True, False, True), ("batched", 64, 128, True, True, False)])
def test_the_split_call_matches_its_restatement_in_both_query_forms(split_call, tile_m, tile_n,
                                                                    pack_gqa, overlap, rs):
    """One query per virtual request, non-causal, lse as (V, H): parts of 300, 128, 1 and 0
    keys (an empty slot: zeros and lse -inf) through page rows that start mid-request."""
    lay = layer(128)
    c = build_batch([1000], [1], layer=lay, page_size=PAGE, dtype=BF16, device="cuda",
                    page_tail_fill=PAGE_TAIL_FILL)
    assert c.batch.page_table.shape[1] >= 8, "the request's 8 pages"
    for pool in (c.kv.k[0], c.kv.v[0]):
        pool.nan_to_num_(nan=PAGE_TAIL_FILL)
    kp, vp = c.kv.k[0].view(-1, PAGE, 8, 128), c.kv.v[0].view(-1, PAGE, 8, 128)
    row = c.batch.page_table[0].to(torch.int32)
    q = torch.randn(4, 32, 128, dtype=BF16, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    args = dict(seqused_k=torch.tensor([300, 128, 1, 0], dtype=torch.int32, device="cuda"),
                page_table=torch.stack([row[0:3], row[2:5], row[5:8], row[0:3]]).contiguous(),
                softmax_scale=lay.scale)
    real = FA4Kernel(FA4Options(split_call=split_call, split_tile_m=tile_m, split_tile_n=tile_n,
                                split_pack_gqa=pack_gqa, split_intra_wg_overlap=overlap,
                                split_mma_pv_is_rs=rs), torch.device("cuda"))
    out, lse = real.split_decode(q, kp, vp, **args)
    ref_out, ref_lse = ReferenceKernel().split_decode(q, kp, vp, **args)
    assert out.shape == (4, 32, 128) and lse.shape == (4, 32)
    assert float((out[:3].float() - ref_out[:3].float()).abs().max()) <= 3e-2
    assert float((lse[:3] - ref_lse[:3]).abs().max()) <= 2e-2
    assert torch.equal(out[3], torch.zeros_like(out[3])) and bool((lse[3] == float("-inf")).all())


def test_the_triton_merge_equals_the_float64_merge_to_bf16_rounding_and_replays_in_a_graph():
    from hinge_fa4.combine import merge_parts, merge_parts_torch

    gen = torch.Generator("cuda").manual_seed(1)
    slots, rows = 9, 16
    out = torch.randn(rows * slots, 32, 128, device="cuda", generator=gen).to(BF16)
    lse = torch.randn(32, rows * slots, device="cuda", generator=gen).t() * 4  # a (V, H) view
    parts = torch.randint(1, slots + 1, (rows,), dtype=torch.int32, device="cuda", generator=gen)
    want = merge_parts_torch(out.double(), lse.double(), parts, slots)
    got = merge_parts(out, lse, parts, slots, BF16)
    err = float((got.double() - want).abs().max())
    assert err <= 1.6e-2 * max(1.0, float(want.abs().max())), f"max |triton - float64| = {err:.3g}"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = merge_parts(out, lse, parts, slots, BF16)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(replayed, got)


@pytest.mark.parametrize("kv_saved", [False, True])
def test_a_split_layer_launches_three_kernels_or_two_with_its_kv_stored(kv_saved):
    """The KV write and the query copy into the slots in one launch (``prepare_triton``), the
    attention call, the merge: the profile of one split decode layer at 4096 keys (was ~45 with
    two calls and torch merges, then 5 with two KV copies and the query copy). With the KV
    stored by the layer, batch 1's query row is a stride-0 view: the attention call and the
    merge only, and the output is the three-kernel one's."""
    from torch.profiler import ProfilerActivity, profile

    lay = layer(128)
    c = build_batch([4096], [1], layer=lay, page_size=PAGE, dtype=BF16, device="cuda",
                    page_tail_fill=PAGE_TAIL_FILL)
    attn = backend(split_kv="always", split_size=512)
    c.batch.attn_metadata = attn.prepare_metadata(c.batch)
    assert c.batch.attn_metadata.split.num_slots == 9, "8 chunks and a one-key tail"
    want = attn.forward(c.q, c.k, c.v, lay, c.kv, c.batch)  # writes the KV; compiles
    k, v = (torch.full_like(c.k, float("nan")), torch.full_like(c.v, float("nan"))) if kv_saved else (c.k, c.v)
    got = attn.forward(c.q, k, v, lay, c.kv, c.batch, kv_saved=kv_saved)
    torch.cuda.synchronize()
    assert torch.equal(got, want), "the stride-0 query view gives the copied query's bits"
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        attn.forward(c.q, k, v, lay, c.kv, c.batch, kv_saved=kv_saved)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"fa4_split_kernels_{int(kv_saved)}.json"), "w") as f:
            json.dump(kernels, f, indent=2)
    assert len(kernels) <= (2 if kv_saved else 3), f"{len(kernels)} kernels per split layer: {kernels}"


# -- split decode under graphs, and batch invariance ------------------------------------------------


def test_a_captured_split_decode_replays_like_the_oracle():
    from hinge.testing.graphs import check_graph_replay

    attn = backend(split_kv="always", split_size=256, max_splits=4)
    check_graph_replay(attn, "decode", layer(128), PAGE, BF16, device="cuda", num_pages=64,
                       steps=LONG_DECODE_STEPS, page_tail_fill=PAGE_TAIL_FILL)
    assert all(m.split is not None for m in attn._captured.values())


@pytest.mark.parametrize("split_kv", ["always", "never"])
def test_a_requests_bits_are_the_same_alone_and_batched(split_kv):
    lay, attn = layer(128), backend(split_kv=split_kv, split_size=256)

    def rows(prefix, extend, index, seeds):
        c = build_batch(prefix, extend, layer=lay, page_size=PAGE, dtype=BF16, device="cuda",
                        seeds=seeds, page_tail_fill=PAGE_TAIL_FILL)
        c.batch.attn_metadata = attn.prepare_metadata(c.batch)
        return attn.forward(c.q, c.k, c.v, lay, c.kv, c.batch)[c.rows_of(index)].cpu()

    assert torch.equal(rows([1500], [1], 0, [7]), rows([40, 1500, 3000, 5], [1] * 4, 1, [1, 7, 2, 3])), \
        "decode"
    assert torch.equal(rows([0], [300], 0, [9]), rows([0, 0], [77, 300], 1, [4, 9])), "prefill"


# -- warm-up and the JIT cache ------------------------------------------------------------------------


def test_warmup_compiles_into_the_disk_cache(tmp_path, monkeypatch):
    """Run in a fresh process so the cache switches are read at import (this one may have
    imported flash_attn.cute already)."""
    import subprocess
    import sys

    code = (
        "import torch; from hinge.plugins import BuildContext; from hinge.testing.batches import build_batch;"
        "from hinge.contracts import AttentionLayer; from hinge_fa4.backend import FA4AttentionBackend;"
        "from hinge_fa4.options import FA4Options;"
        f"b = FA4AttentionBackend(FA4Options(jit_cache_dir={str(tmp_path)!r}), BuildContext('cuda', torch.bfloat16, False, 128));"
        "lay = AttentionLayer(0, 32, 8, 128, 128 ** -0.5);"
        "c = build_batch([0], [1], layer=lay, page_size=128, dtype=torch.bfloat16, device='cuda');"
        "b.warmup([lay], c.kv)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_CUTE_DSL")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert any(tmp_path.rglob("*")), "warm-up wrote nothing to the JIT cache directory"


# -- end to end ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_tiny_models_generate_with_fa4_what_they_generate_with_flashinfer(tmp_path, arch):
    """Greedy tokens equal, or the first divergence is a bf16 near-tie (top-2 logprob gap
    under 0.05 in the flashinfer run); the gaps are reported."""
    from hinge import LLM
    from hinge.sampling_params import SamplingParams

    path = make_tiny_checkpoint(arch, tmp_path / arch, seed=4, head_dim=64, max_position_embeddings=4096)
    write_byte_tokenizer(path)
    prompts = [torch.randint(32, 127, (n,), generator=torch.Generator().manual_seed(n)).tolist()
               for n in (5, 130, 700, 2000)]
    params = SamplingParams(max_new_tokens=40, temperature=0.0, logprobs=True, top_logprobs=2)
    runs = {}
    for attention in ("fa4", "flashinfer"):
        with LLM(str(path), device="cuda", attention=attention, cache="none") as llm:
            runs[attention] = llm.generate(prompts, params)
    report = []
    for i, (a, b) in enumerate(zip(runs["fa4"], runs["flashinfer"], strict=True)):
        first = next((j for j, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=True)) if x != y), None)
        gap = None
        if first is not None:
            top = b.top_logprobs[first]
            gap = top[0][1] - top[1][1]
        report.append({"prompt": i, "diverges_at": first, "flashinfer_top2_gap": gap})
        assert first is None or gap < 0.05, f"{arch} prompt {i}: diverged at {first} with gap {gap}"
    if os.environ.get("OUT"):
        out = os.path.join(os.environ["OUT"], "fa4_end_to_end.json")
        old = json.load(open(out)) if os.path.exists(out) else {}
        json.dump({**old, arch: report}, open(out, "w"), indent=2)
