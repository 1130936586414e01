"""Page allocator and KV sizing."""

from __future__ import annotations

import logging

import pytest
import torch

from hinge.contracts import AttentionLayer
from hinge.engine.kv_pool import KVPool, PageAllocator, kv_budget_bytes, kv_bytes_per_token


def _layers(n=2, kv_heads=2, head_dim=8):
    return [AttentionLayer(i, 4, kv_heads, head_dim, head_dim ** -0.5) for i in range(n)]


def test_page_zero_is_reserved_and_fresh_pages_come_lowest_first():
    pool = PageAllocator(5)
    assert pool.num_usable == 4 and pool.num_free == 4
    assert pool.allocate(2) == [1, 2]
    assert pool.allocate(2) == [3, 4]
    assert not pool.can_allocate(1) and pool.can_allocate(0)


def test_freed_pages_are_reused_and_counts_balance():
    pool = PageAllocator(6)
    a = pool.allocate(3)
    pool.free(a[:2])
    assert pool.num_used == 1 and pool.num_free == 4
    again = pool.allocate(4)
    assert 0 not in again and set(a[:2]) <= set(again)


def test_a_huge_pool_costs_nothing_until_used():
    pool = PageAllocator(50_000_000)
    assert pool.num_free == 49_999_999 and pool.allocate(3) == [1, 2, 3]
    pool.free([2])
    assert pool.allocate(2) == [2, 4] and pool.num_free == 49_999_995


def test_double_free_is_caught():
    pool = PageAllocator(4)
    pages = pool.allocate(1)
    pool.free(pages)
    with pytest.raises(AssertionError, match="double free"):
        pool.free(pages)


def test_kv_cache_is_sized_from_the_byte_budget_and_logged_in_tokens(caplog):
    layers = _layers()
    per_token = kv_bytes_per_token(layers, torch.float32)
    assert per_token == 2 * (2 * 2 * 8 * 4)
    budget = per_token * 4 * 10 + 7  # ten pages of four tokens and a few spare bytes
    with caplog.at_level(logging.INFO, logger="hinge.engine.kv_pool"):
        kv = KVPool.create(layers, budget_bytes=budget, page_size=4, dtype=torch.float32,
                            device="cpu")
    assert kv.num_pages == 10 and kv.num_usable_tokens == 36
    assert kv.k[0].shape == (40, 2, 8) and len(kv.v) == 2
    assert kv.allocator.num_usable == 9
    assert "KV cache: 36 tokens (9 pages of 4)" in caplog.text


def test_budget_too_small_for_two_pages_says_what_to_raise():
    with pytest.raises(ValueError, match="kv_cache_bytes"):
        KVPool.create(_layers(), budget_bytes=100, page_size=16, dtype=torch.float32,
                       device="cpu")


def test_cpu_budget_is_kv_cache_bytes_with_a_256_mib_default():
    assert kv_budget_bytes("cpu", kv_cache_bytes=None, mem_fraction_static=0.9) == 256 << 20
    assert kv_budget_bytes("cpu", kv_cache_bytes=12345, mem_fraction_static=0.9) == 12345


def test_slot_maps_positions_through_pages():
    kv = KVPool.create(_layers(1), budget_bytes=1 << 20, page_size=4, dtype=torch.float32,
                        device="cpu")
    assert [kv.slot([7, 2], p) for p in (0, 3, 4, 6)] == [28, 31, 8, 10]
    assert kv.pages_needed(0) == 0 and kv.pages_needed(4) == 1 and kv.pages_needed(5) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_budget_is_a_fraction_of_free_memory_minus_weights():
    free, _ = torch.cuda.mem_get_info()
    weights = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    budget = kv_budget_bytes("cuda", kv_cache_bytes=None, mem_fraction_static=0.5,
                             free_before_weights=free)
    assert abs(budget - (free // 2 - (256 << 20))) < (64 << 20)
    del weights


def test_cuda_budget_arithmetic_takes_weights_and_the_profiled_step_out_of_the_fraction():
    gib = 1 << 30
    budget = kv_budget_bytes("cuda", kv_cache_bytes=None, mem_fraction_static=0.8,
                             free_before_weights=100 * gib, free_now=84 * gib,
                             activation_bytes=6 * gib)
    assert budget == 80 * gib - 16 * gib - 6 * gib
    capped = kv_budget_bytes("cuda", kv_cache_bytes=gib, mem_fraction_static=0.8,
                             free_before_weights=100 * gib, free_now=84 * gib, activation_bytes=0)
    assert capped == gib
    # the process's own count of its weights wins over the drop in free memory (which another
    # process starting beside it also causes)
    own = kv_budget_bytes("cuda", kv_cache_bytes=None, mem_fraction_static=0.8,
                          free_before_weights=100 * gib, free_now=40 * gib, activation_bytes=0,
                          weight_bytes=16 * gib)
    assert own == 80 * gib - 16 * gib
    with pytest.raises(ValueError, match="lower chunked_prefill_size"):
        kv_budget_bytes("cuda", kv_cache_bytes=None, mem_fraction_static=0.5,
                        free_before_weights=100 * gib, free_now=60 * gib, activation_bytes=11 * gib)


def test_profiling_forward_costs_nothing_off_cuda():
    from hinge.engine.memory import profile_step_bytes

    assert profile_step_bytes(None, None, num_tokens=512, page_size=16, dtype=torch.float32,
                              device="cpu") == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_sampler_peak_covers_a_full_sort_of_every_row_at_qwen3s_vocabulary():
    from hinge.engine.memory import sampler_peak_bytes

    rows, vocab = 65, 151936
    peak = sampler_peak_bytes(rows, vocab, "cuda")
    # at least the logits, the sorted values and their int64 ids live at once
    assert rows * vocab * (4 + 4 + 8) <= peak < rows * vocab * 200


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_engine_on_cuda_sizes_kv_after_profiling_the_largest_step(tiny_qwen3):
    """The profiled peak grows with the step and is taken out of the KV budget; a step of the
    profiled size then runs without running out of memory."""
    from hinge import LLM, SamplingParams
    from hinge.engine.memory import profile_step_bytes

    with LLM(str(tiny_qwen3), device="cuda", chunked_prefill_size=256) as llm:
        eng = llm.engine
        small = profile_step_bytes(eng.model, eng.attn, num_tokens=16, page_size=16,
                                   dtype=eng.dtype, device="cuda")
        large = profile_step_bytes(eng.model, eng.attn, num_tokens=256, page_size=16,
                                   dtype=eng.dtype, device="cuda")
        assert 0 < small < large
        out = llm.generate([list(range(3, 250))], SamplingParams(max_new_tokens=4, ignore_eos=True))
        assert len(out[0].token_ids) == 4
