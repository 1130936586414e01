"""The generic weight loaders: partitions of fused layers, tensor-parallel shards, experts."""

from __future__ import annotations

import pytest
import torch

from hinge.contracts import LinearSpec, MoESpec
from hinge.layers.weights import (
    ShapeMismatch,
    linear_bias,
    linear_parameter,
    moe_parameter,
)


def spec(parallel="column", rank=0, world_size=1, sizes=(8, 4, 4), bias=True):
    return LinearSpec(prefix="attn.qkv_proj", input_size=6, output_sizes=sizes,
                      shard_names=tuple(f"attn.{n}_proj" for n in "qkv"[: len(sizes)]), bias=bias,
                      dtype=torch.float32, parallel=parallel, rank=rank, world_size=world_size)


def full(rows, cols=6, start=0):
    return torch.arange(start, start + rows * cols, dtype=torch.float32).reshape(rows, cols)


def test_partitions_of_a_fused_weight_land_at_their_offsets():
    s = spec()
    w = linear_parameter(s, (16, 6), torch.float32)
    q, k, v = full(8), full(4, start=100), full(4, start=200)
    for shard, t in enumerate((q, k, v)):
        w.weight_loader(w, t, shard)
    assert torch.equal(w.data, torch.cat([q, k, v]))


@pytest.mark.parametrize("rank", [0, 1])
def test_column_parallel_rank_keeps_its_half_of_every_partition(rank):
    s = spec(rank=rank, world_size=2)
    w = linear_parameter(s, (8, 6), torch.float32)
    b = linear_bias(s)
    parts = [full(8), full(4, start=100), full(4, start=200)]
    for shard, t in enumerate(parts):
        w.weight_loader(w, t, shard)
        b.weight_loader(b, t[:, 0], shard)
    expected = torch.cat([p[rank * len(p) // 2:(rank + 1) * len(p) // 2] for p in parts])
    assert torch.equal(w.data, expected)
    assert torch.equal(b.data, expected[:, 0])


@pytest.mark.parametrize("rank", [0, 1])
def test_row_parallel_rank_keeps_its_input_columns_and_rank_0_alone_the_bias(rank):
    s = spec("row", rank, 2, sizes=(5,))
    w = linear_parameter(s, (5, 3), torch.float32)
    b = linear_bias(s)
    w.weight_loader(w, full(5), 0)
    b.weight_loader(b, torch.arange(5.0) + 1, 0)
    assert torch.equal(w.data, full(5)[:, rank * 3:(rank + 1) * 3])
    assert torch.equal(b.data, torch.arange(5.0) + 1 if rank == 0 else torch.zeros(5))


def test_block_scales_split_in_proportion_to_the_weight():
    """A (rows, in/2) scale tensor of a fused layer: partition offsets scale with its dims."""
    s = spec(rank=1, world_size=2)
    scale = linear_parameter(s, (8, 3), torch.float32)
    parts = [full(8, 3), full(4, 3, 100), full(4, 3, 200)]
    for shard, t in enumerate(parts):
        scale.weight_loader(scale, t, shard)
    assert torch.equal(scale.data, torch.cat([parts[0][4:], parts[1][2:], parts[2][2:]]))


def test_a_mis_shaped_partition_names_both_shapes():
    s = spec()
    w = linear_parameter(s, (16, 6), torch.float32)
    with pytest.raises(ShapeMismatch, match=r"has shape \(5, 6\), the model expects \(4, 6\)"):
        w.weight_loader(w, full(5), 1)


def test_an_unknown_partition_is_refused_with_the_known_ones():
    s = spec()
    w = linear_parameter(s, (16, 6), torch.float32)
    with pytest.raises(ValueError, match="attn.q_proj, attn.k_proj, attn.v_proj"):
        w.weight_loader(w, full(4), 3)


def test_a_size_that_does_not_split_over_the_ranks_is_refused_naming_the_layer():
    with pytest.raises(ValueError, match="attn.qkv_proj.*world_size=3"):
        spec(world_size=3)


@pytest.mark.parametrize("rank", [0, 1])
def test_expert_shards_land_in_their_expert_half_and_rank(rank):
    s = MoESpec(prefix="mlp.experts", num_experts=3, hidden_size=6, intermediate_size=4, top_k=2,
                dtype=torch.float32, rank=rank, world_size=2)
    w13 = moe_parameter(s, (3, 4, 6), torch.float32)
    w2 = moe_parameter(s, (3, 6, 2), torch.float32)
    gate, up, down = full(4), full(4, start=500), full(6, 4, 900)
    w13.weight_loader(w13, gate, "w1", 2)
    w13.weight_loader(w13, up, "w3", 2)
    w2.weight_loader(w2, down, "w2", 2)
    half = slice(rank * 2, rank * 2 + 2)
    assert torch.equal(w13.data[2], torch.cat([gate[half], up[half]]))
    assert torch.equal(w2.data[2], down[:, half])
    assert s.checkpoint_name(2, "w3") == "mlp.experts.2.up_proj"
    with pytest.raises(ValueError, match="expert 3 is out of range"):
        w2.weight_loader(w2, down, "w2", 3)
