"""Parameters that know how to load themselves: the generic weight loaders of linear layers and
expert sets, for ``Quantizer.create_weights`` / ``create_moe_weights`` to attach.

A parameter made here carries ``weight_loader`` and the roles of its dims: ``output_dim`` (the
dim along output features: partitions are stacked on it, column-parallel ranks split it) and
``input_dim`` (row-parallel ranks split it); None = the dim does not exist (a per-tensor scale).
Offsets are proportional, so a tensor with fewer entries per feature (block scales) or packed
values (two 4-bit codes per byte) is placed and split the same way as the weight:

    fused param, output dim:  | q rows      | k rows | v rows |    shard_id 0, 1, 2
    rank r of 2 (column):       checkpoint rows [r*n/2, (r+1)*n/2) of each partition

Errors raised here (``ValueError``) are wrapped by the model loader with the checkpoint tensor's
name and file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from hinge.contracts import LinearSpec, MoESpec

MOE_SHARDS = ("w1", "w3", "w2")  #: gate, up (both into w13), down (into w2)


class ShapeMismatch(ValueError):
    """A checkpoint tensor does not fit the place it loads into."""

    def __init__(self, got: tuple[int, ...], expected: tuple[int, ...], note: str = "") -> None:
        self.got, self.expected = got, expected
        super().__init__(f"has shape {got}, the model expects {expected}{note}")


def set_weight_attrs(tensor: torch.Tensor, *, weight_loader: Callable | None = None,
                     output_dim: int | None = None, input_dim: int | None = None,
                     checkpoint_shards: tuple[int, ...] | None = None) -> torch.Tensor:
    """Attach a loader and dim roles to a parameter or buffer; returns it.

    ``checkpoint_shards``: the partitions of a fused linear whose checkpoint holds this tensor
    (None = every partition). A fused layer whose partitions are stored differently (some
    quantized, some excluded from quantization) declares its scales for the quantized ones
    only, so the loader neither routes nor expects the others."""
    tensor.weight_loader = weight_loader
    tensor.output_dim = output_dim
    tensor.input_dim = input_dim
    tensor.checkpoint_shards = checkpoint_shards
    return tensor


def copy_checked(target: torch.Tensor, tensor: torch.Tensor, note: str = "") -> None:
    """``target.copy_(tensor)`` after checking shapes (no broadcasting, dtype converted)."""
    if tuple(tensor.shape) != tuple(target.shape):
        raise ShapeMismatch(tuple(tensor.shape), tuple(target.shape), note)
    with torch.no_grad():
        target.copy_(tensor)


def default_weight_loader(param: torch.Tensor, tensor: torch.Tensor, *_: object) -> None:
    """The whole tensor into the whole parameter (unfused, unsharded tensors)."""
    copy_checked(param.data, tensor)


def load_into(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | str | None = None,
              expert_id: int | None = None) -> None:
    """Call ``param``'s ``weight_loader`` as the model loader does: ``(param, tensor, shard_id)``
    for a linear's partition, ``(param, tensor, shard_id, expert_id)`` for an expert's; a tensor
    without one is copied whole."""
    loader = getattr(param, "weight_loader", None)
    if loader is None:
        default_weight_loader(param, tensor)
    elif expert_id is None:
        loader(param, tensor, shard_id)
    else:
        loader(param, tensor, shard_id, expert_id)


def rank_slice(tensor: torch.Tensor, dim: int, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous ``1 / world_size`` of ``tensor`` along ``dim``."""
    if world_size == 1:
        return tensor
    size = tensor.shape[dim]
    if size % world_size:
        raise ValueError(f"has {size} entries along dim {dim}, which do not split into "
                         f"world_size={world_size} equal shards")
    part = size // world_size
    return tensor.narrow(dim, rank * part, part)


def _partition(target: torch.Tensor, dim: int, sizes: tuple[int, ...], index: int) -> torch.Tensor:
    """The ``index``-th of partitions sized in proportion to ``sizes`` along ``dim``."""
    total, whole = sum(sizes), target.shape[dim]
    start, size = whole * sum(sizes[:index]), whole * sizes[index]
    if start % total or size % total:
        raise ValueError(f"partition {index} of sizes {sizes} does not fall on whole entries of a "
                         f"tensor with {whole} entries along dim {dim}")
    return target.narrow(dim, start // total, size // total)


def linear_weight_loader(spec: LinearSpec) -> Callable[[torch.Tensor, torch.Tensor, int], None]:
    """``weight_loader(param, tensor, shard_id)`` for a tensor of the layer ``spec`` describes:
    partition ``shard_id``'s place along ``param.output_dim``, this rank's shard of ``tensor``."""

    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | None = None) -> None:
        shard = 0 if shard_id is None else shard_id
        if not 0 <= shard < len(spec.output_sizes):
            raise ValueError(f"shard_id {shard_id} is not a partition of {spec.prefix} "
                             f"(it has {len(spec.output_sizes)}: {', '.join(spec.shard_names)})")
        target = param.data
        out_dim, in_dim = getattr(param, "output_dim", None), getattr(param, "input_dim", None)
        if out_dim is not None:
            target = _partition(target, out_dim, spec.output_sizes_per_partition, shard)
            if spec.parallel == "column":
                tensor = rank_slice(tensor, out_dim, spec.rank, spec.world_size)
        if in_dim is not None and spec.parallel == "row":
            tensor = rank_slice(tensor, in_dim, spec.rank, spec.world_size)
        copy_checked(target, tensor)

    return load


def linear_parameter(spec: LinearSpec, shape: tuple[int, ...], dtype: torch.dtype, *,
                     output_dim: int | None = 0, input_dim: int | None = 1) -> nn.Parameter:
    """An empty frozen parameter of this rank's ``shape`` with the generic linear loader."""
    param = nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    return set_weight_attrs(param, weight_loader=linear_weight_loader(spec),
                            output_dim=output_dim, input_dim=input_dim)


def linear_bias(spec: LinearSpec, dtype: torch.dtype | None = None) -> nn.Parameter:
    """The bias (``spec.output_size_per_partition``,). A row-parallel layer's bias loads on rank
    0 only (zeros elsewhere), so the sum of the ranks' partial outputs adds it once."""
    bias = linear_parameter(spec, (spec.output_size_per_partition,), dtype or spec.dtype, input_dim=None)
    if spec.parallel == "row" and spec.rank > 0:
        generic = bias.weight_loader

        def load_zeros(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | None = None) -> None:
            generic(param, tensor, shard_id)
            param.data.zero_()

        bias.weight_loader = load_zeros
    return bias


def moe_weight_loader(spec: MoESpec) -> Callable[[torch.Tensor, torch.Tensor, str, int], None]:
    """``weight_loader(param, tensor, shard_id, expert_id)`` for a stacked expert tensor:
    ``param[expert_id]`` receives ``tensor`` (gate ``w1`` in the first half of ``output_dim`` of
    a ``w13_*`` tensor, up ``w3`` in the second), this rank's shard of the intermediate dim cut
    (``output_dim`` of w1/w3, ``input_dim`` of w2; dims count within one expert's tensor)."""

    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: str, expert_id: int) -> None:
        if shard_id not in MOE_SHARDS:
            raise ValueError(f"shard_id {shard_id!r} is not one of {', '.join(MOE_SHARDS)}")
        if not 0 <= expert_id < param.shape[0]:
            raise ValueError(f"expert {expert_id} is out of range: {spec.prefix} has {param.shape[0]} experts")
        target = param.data[expert_id]
        out_dim, in_dim = getattr(param, "output_dim", None), getattr(param, "input_dim", None)
        if shard_id in ("w1", "w3"):
            if out_dim is not None:
                target = _partition(target, out_dim, (1, 1), 0 if shard_id == "w1" else 1)
                tensor = rank_slice(tensor, out_dim, spec.rank, spec.world_size)
        elif in_dim is not None:
            tensor = rank_slice(tensor, in_dim, spec.rank, spec.world_size)
        copy_checked(target, tensor)

    return load


def moe_parameter(spec: MoESpec, shape: tuple[int, ...], dtype: torch.dtype, *,
                  output_dim: int | None = 0, input_dim: int | None = 1) -> nn.Parameter:
    """An empty frozen stacked-expert parameter (``shape[0]`` = experts) with the generic expert
    loader; ``output_dim`` / ``input_dim`` count within one expert's tensor (``param[e]``)."""
    param = nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    return set_weight_attrs(param, weight_loader=moe_weight_loader(spec),
                            output_dim=output_dim, input_dim=input_dim)
