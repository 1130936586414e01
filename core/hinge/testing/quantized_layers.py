"""Build a linear layer or an expert set through a quantizer and load checkpoint tensors into it
exactly as the model loader does (routes, ``weight_loader``, partitions, experts, ranks), for
``QuantizerContract`` and for plugin tests of their own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hinge.contracts import MoESpec
from hinge.layers.linear import Linear, TensorParallel, loadable
from hinge.layers.moe import FusedMoE
from hinge.layers.weights import load_into


def build_linear(quantizer: Any, in_features: int, output_sizes: Sequence[int], bias: bool,
                 dtype: torch.dtype, device: str, *, parallel: str = "replicated", rank: int = 0,
                 world_size: int = 1) -> Linear:
    """A ``Linear`` named ``layer`` whose partition ``i`` is the checkpoint linear ``part{i}``."""
    with torch.device(device):
        return Linear(in_features, tuple(output_sizes), bias, quantizer, dtype, "layer",
                      shard_names=tuple(f"part{i}" for i in range(len(output_sizes))),
                      parallel=parallel, tp=TensorParallel(rank, world_size))


def load_linear(layer: Linear, shards: Sequence[dict[str, torch.Tensor]]) -> Linear:
    """Load ``shards[i]`` (partition ``i``'s checkpoint tensors by suffix: ``weight``, ``bias``,
    ``weight_scale``, ...) through the layer's routes, then ``process_weights_after_loading``."""
    routes, params = layer.checkpoint_routes(""), loadable(layer)
    loaded = set()
    for shard_name, tensors in zip(layer.spec.shard_names, shards, strict=True):
        for suffix, tensor in tensors.items():
            name = f"{shard_name}.{suffix}"
            assert name in routes, (
                f"checkpoint tensor {suffix!r} of partition {shard_name} has no parameter; "
                f"create_weights made: {sorted(params)}")
            route = routes[name]
            load_into(params[route.param], tensor.to(params[route.param].device), route.shard_id)
            loaded.add(name)
    missing = sorted(set(routes) - loaded)
    assert not missing, f"parameters that no checkpoint tensor filled: {missing}"
    layer.quantizer.process_weights_after_loading(layer)
    return layer


def build_moe(quantizer: Any, num_experts: int, hidden_size: int, intermediate_size: int, top_k: int,
              dtype: torch.dtype, device: str, *, rank: int = 0, world_size: int = 1) -> FusedMoE:
    """A ``FusedMoE`` named ``experts`` (checkpoint names ``experts.{e}.gate_proj`` ...)."""
    spec = MoESpec(prefix="experts", num_experts=num_experts, hidden_size=hidden_size,
                   intermediate_size=intermediate_size, top_k=top_k, dtype=dtype,
                   rank=rank, world_size=world_size)
    with torch.device(device):
        return FusedMoE(spec, quantizer)


def load_moe(layer: FusedMoE, experts: Sequence[dict[str, dict[str, torch.Tensor]]]) -> FusedMoE:
    """Load ``experts[e][shard]`` (``shard`` = ``w1`` gate, ``w3`` up, ``w2`` down: tensors by
    suffix) through the layer's routes, then ``process_moe_weights_after_loading``."""
    routes, params = layer.checkpoint_routes(""), loadable(layer)
    loaded = set()
    for expert_id, shards in enumerate(experts):
        for shard_id, tensors in shards.items():
            for suffix, tensor in tensors.items():
                name = f"{layer.spec.checkpoint_name(expert_id, shard_id)}.{suffix}"
                assert name in routes, (
                    f"checkpoint tensor {name!r} has no parameter; create_moe_weights made: {sorted(params)}")
                route = routes[name]
                load_into(params[route.param], tensor.to(params[route.param].device),
                          route.shard_id, route.expert_id)
                loaded.add(name)
    missing = sorted(set(routes) - loaded)
    assert not missing, f"expert parameters that no checkpoint tensor filled: {missing[:8]}"
    layer.quantizer.process_moe_weights_after_loading(layer)
    return layer


def random_routing(num_tokens: int, num_experts: int, top_k: int, dtype: torch.dtype,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct expert ids per row in ascending order (as the router hands them) and positive
    weights: (T, k) int64 and (T, k) ``dtype``."""
    ids = torch.stack([torch.randperm(num_experts, generator=generator)[:top_k] for _ in range(num_tokens)])
    weights = torch.rand(num_tokens, top_k, generator=generator) + 0.1
    return ids.sort(dim=-1).values, (weights / weights.sum(-1, keepdim=True)).to(dtype)
