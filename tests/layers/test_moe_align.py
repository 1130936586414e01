"""Grouping (token, slot) pairs by expert for the Triton grouped GEMM, checked on CPU."""

from __future__ import annotations

import pytest
import torch

from hinge.layers.moe_align import align_pairs


@pytest.mark.parametrize("num_tokens,num_experts,top_k,block_m", [(1, 8, 2, 16), (37, 5, 3, 16), (200, 16, 4, 64)])
def test_every_pair_sits_once_in_a_block_of_its_own_expert(num_tokens, num_experts, top_k, block_m):
    gen = torch.Generator().manual_seed(num_tokens)
    ids = torch.stack([torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(num_tokens)])
    sorted_pairs, block_expert, padded_total = align_pairs(ids, num_experts, block_m)
    num_pairs = ids.numel()
    total = int(padded_total)
    assert total % block_m == 0 and total <= sorted_pairs.numel()
    live = sorted_pairs[:total]
    real = live[live < num_pairs]
    assert sorted(real.tolist()) == list(range(num_pairs)), "a pair is missing or repeated"
    assert bool((sorted_pairs[total:] == num_pairs).all()), "rows past the padded total must be padding"
    flat = ids.reshape(-1)
    for b in range(total // block_m):
        rows = live[b * block_m:(b + 1) * block_m]
        rows = rows[rows < num_pairs]
        assert bool((flat[rows.long()] == block_expert[b]).all()), f"block {b} mixes experts"
    assert bool((block_expert[total // block_m:] == num_experts).all())


def test_pairs_of_one_expert_keep_their_order_and_groups_are_padded_to_the_block():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]])  # pairs 0..5 = experts 2, 0, 2, 1, 0, 2
    sorted_pairs, block_expert, padded_total = align_pairs(ids, 3, 4)
    assert int(padded_total) == 12
    assert sorted_pairs[:12].tolist() == [1, 4, 6, 6, 3, 6, 6, 6, 0, 2, 5, 6]
    assert block_expert.tolist()[:3] == [0, 1, 2]
