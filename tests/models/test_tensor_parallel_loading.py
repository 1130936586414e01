"""Tensor-parallel loading on CPU: the same checkpoint built at world_size=2 as rank 0 and rank 1;
each rank holds exactly its shard of every checkpoint tensor (no collectives run)."""

from __future__ import annotations

import pytest
import torch
from model_oracle import build_context
from safetensors.torch import load_file

from hinge.builtin.no_quant import NoQuantizer
from hinge.layers import FusedMoE, Linear
from hinge.models.loader import load_model
from hinge.testing.checkpoints import make_tiny_checkpoint


def load_rank(path, rank, world_size=2):
    return load_model(path, device="cpu", dtype=torch.float32, quantizer=NoQuantizer(None, build_context()),
                      progress=False, rank=rank, world_size=world_size)


def half(tensor: torch.Tensor, dim: int, rank: int) -> torch.Tensor:
    n = tensor.shape[dim] // 2
    return tensor.narrow(dim, rank * n, n)


def expected_linear(ckpt: dict, layer: Linear, suffix: str, rank: int) -> torch.Tensor:
    """This rank's tensor, cut from the checkpoint by hand: rows of each partition (column),
    input columns (row weight), the bias on rank 0 only (row), everything (replicated)."""
    parts = [ckpt[f"{name}.{suffix}"] for name in layer.spec.shard_names]
    style = layer.spec.parallel
    if style == "column":
        return torch.cat([half(p, 0, rank) for p in parts])
    if style == "row" and suffix == "weight":
        return half(parts[0], 1, rank)
    if style == "row":  # bias: added once over the ranks
        return parts[0] if rank == 0 else torch.zeros_like(parts[0])
    return torch.cat(parts)


VARIANTS = {
    "qwen3": ("qwen3", {}),
    "llama_biases": ("llama", dict(attention_bias=True, mlp_bias=True)),
    "qwen3_moe": ("qwen3_moe", {}),
    "qwen3_5": ("qwen3_5", {}),
    "qwen3_next": ("qwen3_next", {}),
    "lfm2": ("lfm2", {}),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_rank_holds_its_shard_of_every_checkpoint_tensor(variant, tmp_path):
    arch, overrides = VARIANTS[variant]
    path = make_tiny_checkpoint(arch, tmp_path, **overrides)
    whole = load_rank(path, 0, world_size=1)
    ckpt = {whole.checkpoint_param_name(k): v for k, v in load_file(path / "model.safetensors").items()}
    for rank in (0, 1):
        model = load_rank(path, rank)
        checked = 0
        for name, module in model.named_modules():
            if isinstance(module, Linear):
                for suffix in ("weight", "bias"):
                    if getattr(module, suffix, None) is not None:
                        got = getattr(module, suffix)
                        assert torch.equal(got, expected_linear(ckpt, module, suffix, rank)), f"{name}.{suffix}"
                        checked += 1
            elif isinstance(module, FusedMoE):
                for e in range(module.spec.num_experts):
                    gate, up, down = (ckpt[f"{module.spec.checkpoint_name(e, s)}.weight"] for s in ("w1", "w3", "w2"))
                    assert torch.equal(module.w13_weight[e], torch.cat([half(gate, 0, rank), half(up, 0, rank)]))
                    assert torch.equal(module.w2_weight[e], half(down, 1, rank))
                    checked += 1
        assert checked > 0
        sharded = {n for n, m in model.named_modules() if isinstance(m, (Linear, FusedMoE))}
        for name, tensor in model.state_dict().items():  # norms, embeddings, convs: replicated
            if name.rsplit(".", 1)[0] not in sharded:
                assert torch.equal(tensor, whole.state_dict()[name]), name
        for layer in model.attention_layers:
            assert (layer.num_heads, layer.num_kv_heads) == (2, 1)


def test_a_world_size_that_does_not_split_the_heads_is_refused_naming_the_field(tiny_checkpoint):
    with pytest.raises(ValueError, match="num_attention_heads = 4 does not split over tensor-parallel world_size 3"):
        load_rank(tiny_checkpoint("qwen3"), 0, world_size=3)


def test_column_shards_of_both_ranks_rebuild_the_fused_layer(tiny_checkpoint):
    path = tiny_checkpoint("llama")
    whole, ranks = load_rank(path, 0, world_size=1), [load_rank(path, r) for r in (0, 1)]
    qkv = [m.model.layers[1].self_attn.qkv_proj.weight for m in ranks]
    sizes = whole.model.layers[1].self_attn.qkv_proj.spec.output_sizes
    pieces = [torch.split(w, [s // 2 for s in sizes]) for w in qkv]
    rebuilt = torch.cat([torch.cat([pieces[0][i], pieces[1][i]]) for i in range(len(sizes))])
    assert torch.equal(rebuilt, whole.model.layers[1].self_attn.qkv_proj.weight)
