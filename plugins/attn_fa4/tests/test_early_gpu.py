"""fa4's forward launched early (``hinge_fa4.early``) on a CUDA GPU of compute capability 9.x:
the same bits as flash-attn's plain launch (prefill and the split call), and a call placed right
after a kernel that lets it launch at once but writes the queries only ~5 ms later reads the
written queries (its warps wait); the same call without the waits reads them before they are
written (so the test can see a missing wait)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("needs a CUDA GPU of compute capability 9.x (sm_90's forward)", allow_module_level=True)

from hinge.plugins.availability import probe_machine, unavailable_reason  # noqa: E402
from hinge_fa4.plugin import FA4_SPEC  # noqa: E402

_REASON = unavailable_reason(FA4_SPEC, probe_machine("cuda"))
if _REASON:
    pytest.skip(f"fa4 cannot run here: {_REASON}", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from hinge_fa4.early import _EarlyLaunch, early_forward  # noqa: E402
from hinge_fa4.kernel import FA4Kernel  # noqa: E402
from hinge_fa4.options import FA4Options  # noqa: E402

PAGE, HEADS, KV_HEADS, DIM = 128, 32, 8, 128
BF16 = torch.bfloat16


@triton.jit
def _late_copy(src_ptr, dst_ptr, n, delay_ns, BLOCK: tl.constexpr):
    """Lets its dependents launch, waits ``delay_ns``, then copies."""
    tl.extra.cuda.gdc_launch_dependents()
    start = tl.extra.cuda.globaltimer()
    while tl.extra.cuda.globaltimer() - start < delay_ns:
        pass
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def late_copy(src: torch.Tensor, dst: torch.Tensor, delay_ns: int = 5_000_000) -> None:
    n = src.numel()
    _late_copy[(triton.cdiv(n, 1024),)](src, dst, n, delay_ns, BLOCK=1024)


def paged_kv(keys: int, seed: int = 0):
    gen = torch.Generator("cuda").manual_seed(seed)
    pages = -(-keys // PAGE)
    k = torch.randn(pages, PAGE, KV_HEADS, DIM, device="cuda", generator=gen).to(BF16)
    v = torch.randn(pages, PAGE, KV_HEADS, DIM, device="cuda", generator=gen).to(BF16)
    return k, v, torch.arange(pages, dtype=torch.int32, device="cuda")


def split_args(keys: int, parts: int):
    """``parts`` virtual requests of one query over consecutive chunks of ``keys // parts``."""
    k, v, pages = paged_kv(keys)
    chunk = keys // parts // PAGE * PAGE
    rows = torch.stack([pages[i * chunk // PAGE:][: -(-chunk // PAGE)] for i in range(parts)])
    used = torch.full((parts,), chunk, dtype=torch.int32, device="cuda")
    return k, v, dict(seqused_k=used, page_table=rows.contiguous(), softmax_scale=DIM ** -0.5)


def kernel(early: bool) -> FA4Kernel:
    return FA4Kernel(FA4Options(early_launch=early), torch.device("cuda"))


def test_the_early_launched_split_call_gives_the_plain_launchs_bits():
    k, v, args = split_args(4096, 8)
    q = torch.randn(8, HEADS, DIM, device="cuda").to(BF16)
    plain, early = kernel(False), kernel(True)
    assert early.early and not plain.early
    want_out, want_lse = plain.split_decode(q, k, v, **args)
    got_out, got_lse = early.split_decode(q, k, v, **args)
    assert torch.equal(got_out, want_out) and torch.equal(got_lse, want_lse)
    assert early.early, "the early launch fell back to the plain one (a warning says why)"


def test_the_early_launched_prefill_gives_the_plain_launchs_bits():
    k, v, pages = paged_kv(1000)
    q = torch.randn(1000, HEADS, DIM, device="cuda").to(BF16)
    args = dict(cu_seqlens_q=torch.tensor([0, 1000], dtype=torch.int32, device="cuda"),
                seqused_k=torch.tensor([1000], dtype=torch.int32, device="cuda"),
                page_table=pages[None].contiguous(), max_seqlen_q=1000, softmax_scale=DIM ** -0.5,
                causal=True)
    want, _ = kernel(False).varlen(q, k, v, **args)
    got, _ = kernel(True).varlen(q, k, v, **args)
    assert torch.equal(got, want)


def _after_a_late_write(call) -> tuple[torch.Tensor, torch.Tensor]:
    """``call(q)`` on a query buffer that a kernel launched just before writes ~5 ms late (past
    the host time of the call itself, which 0.3 ms was not in a full run on the H100); returns
    (what the call gave, what it gives on the written queries: first, so every kernel is
    compiled and loaded before the race)."""
    final = torch.randn(8, HEADS, DIM, device="cuda").to(BF16)
    want = call(final)
    buffer = torch.zeros_like(final)
    late_copy(final, buffer)  # NOTE: compiled (and a first run) outside the race
    buffer.zero_()
    torch.cuda.synchronize()
    late_copy(final, buffer)
    got = call(buffer)
    torch.cuda.synchronize()
    return got, want


def test_an_early_launched_call_waits_for_the_kernel_before_it():
    k, v, args = split_args(4096, 8)
    early = kernel(True)
    got, want = _after_a_late_write(lambda q: early.split_decode(q, k, v, **args)[0].clone())
    assert early.early, "the early launch fell back to the plain one (a warning says why)"
    assert torch.equal(got, want), "the early call read the queries before the kernel wrote them"


def test_without_its_waits_the_early_call_reads_the_queries_before_they_are_written():
    """The test above can fail: the same class without ``griddepcontrol.wait`` (its own in-memory
    compile cache) reads the zeros the late kernel has not yet overwritten."""
    import cutlass.cute as cute
    from flash_attn.cute.cache_utils import JITCache
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90 as base

    class Unwaiting(base):
        def kernel(self, *a, **kw):
            return _EarlyLaunch(base.kernel(self, *a, **kw))

        def load(self, *a, **kw):
            cute.arch.griddepcontrol_launch_dependents()
            return base.load(self, *a, **kw)

    from flash_attn.cute.interface import _flash_attn_fwd

    k, v, args = split_args(4096, 8)
    cache = JITCache()

    def call(q):
        with early_forward(early_class=Unwaiting, compile_cache=cache):
            out, *_ = _flash_attn_fwd(q.view(8, 1, HEADS, DIM), k, v, **args, causal=False,
                                      return_lse=True, tile_mn=(64, 128), num_threads=256,
                                      pack_gqa=True)
        return out.clone()

    got, want = _after_a_late_write(call)
    assert not torch.equal(got, want), "no race seen: the late kernel's delay is too short here"
