"""The parameters of an NVFP4 linear layer or expert set, and their checkpoint loaders.

A linear layer's partitions (``LinearSpec.shard_names``) are quantized or, when the checkpoint
excludes them, plain; the quantized ones are stacked first, the plain ones after:

    weight          uint8 (Nq, K/2)   packed codes of the quantized partitions, in spec order
    weight_scale    fp8   (Nq, K/16)
    weight_scale_2  fp32  (Pq,)       one per quantized partition (a fused layer's may differ)
    input_scale     fp32  (Pq,)       when the checkpoint has activation scales
    k_scale/v_scale fp32  (1,)        on a q|k|v layer whose checkpoint has FP8 KV scales
    weight_plain    buffer (Np, K)    the excluded partitions, model dtype (not a checkpoint name:
                                      their ``weight`` tensors load through ``weight``'s loader)

Names follow the checkpoint's layout (compressed-tensors calls them weight_packed,
weight_global_scale, input_global_scale). Every loader checks the dtype and shape and names
what it expected; the model loader adds the checkpoint tensor's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from hinge.layers.weights import (
    linear_bias,
    linear_weight_loader,
    moe_weight_loader,
    set_weight_attrs,
)
from hinge_nvfp4.format import BLOCK

if TYPE_CHECKING:
    from hinge.contracts import LinearSpec, MoESpec
    from hinge_nvfp4.checkpoint import CheckpointFormat

PACKED, SCALE, GLOBAL = torch.uint8, torch.float8_e4m3fn, torch.float32


def check_dtype(tensor: torch.Tensor, expected: torch.dtype, role: str) -> None:
    if tensor.dtype != expected:
        raise ValueError(f"has dtype {tensor.dtype}, an NVFP4 {role} is {expected}")


def check_block_scales(tensor: torch.Tensor) -> None:
    """Block scales are amax / 6 (/ the global scale): finite and not negative. A NaN or a
    negative one is refused (the kernels would disagree on it: Triton's decode reads magnitudes,
    the reference and the MMA repack honour the sign); -0 passes as 0."""
    bits = tensor.view(torch.uint8)
    bad = (bits > 0x80) | ((bits & 0x7F) == 0x7F)
    if bad.any():
        at = tuple(int(i) for i in bad.nonzero()[0])
        value = float(tensor[at].float())
        raise ValueError(f"has block scale {value} at {list(at)}; NVFP4 block scales are finite and not "
                         "negative (amax / 6): the checkpoint is malformed (re-export it)")


def check_loaded(tensor: torch.Tensor, dtype: torch.dtype, role: str) -> None:
    """A checkpoint tensor loaded as ``role``: its dtype, and a block scale's values."""
    check_dtype(tensor, dtype, role)
    if dtype == SCALE:
        check_block_scales(tensor)


def scalar_of(tensor: torch.Tensor, role: str) -> torch.Tensor:
    """A per-tensor scale as a 0-d fp32 tensor (checkpoints store 0-d or (1,))."""
    check_dtype(tensor, GLOBAL, role)
    if tensor.numel() != 1:
        raise ValueError(f"has shape {tuple(tensor.shape)}, an NVFP4 {role} is one number")
    return tensor.reshape(())


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


def create_linear_params(layer: nn.Module, spec: LinearSpec, fmt: CheckpointFormat) -> None:
    """Register the parameters of ``spec`` on ``layer`` (see the module doc); sets
    ``layer.nvfp4_parts`` (quantized partition ids) and ``layer.plain_parts``."""
    names = fmt.names
    quantized = tuple(i for i, s in enumerate(spec.shard_names) if not fmt.is_excluded(s))
    plain = tuple(i for i in range(len(spec.shard_names)) if i not in quantized)
    layer.nvfp4_parts, layer.plain_parts = quantized, plain
    layer.bias = linear_bias(spec) if spec.bias else None
    k = spec.input_size_per_partition
    if not quantized:
        layer.weight = set_weight_attrs(_empty((spec.output_size_per_partition, k), spec.dtype),
                                        weight_loader=linear_weight_loader(spec), output_dim=0, input_dim=1)
        return
    if k % BLOCK:
        raise ValueError(f"linear {spec.prefix!r}: {k} input features are not a multiple of {BLOCK}; "
                         "NVFP4 cannot store it (the checkpoint must exclude it)")
    qspec = _sub_spec(spec, quantized)
    pspec = _sub_spec(spec, plain) if plain else None
    n_q = qspec.output_size_per_partition
    q_index = {shard: i for i, shard in enumerate(quantized)}
    p_index = {shard: i for i, shard in enumerate(plain)}
    if pspec is not None:
        layer.register_buffer("weight_plain", torch.empty(pspec.output_size_per_partition, k, dtype=spec.dtype),
                              persistent=False)
        set_weight_attrs(layer.weight_plain, output_dim=0, input_dim=1)

    def weight_loader(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | None = None) -> None:
        shard = 0 if shard_id is None else shard_id
        if shard in p_index:
            if not tensor.is_floating_point():
                raise ValueError(f"has dtype {tensor.dtype}; partition {spec.shard_names[shard]} is "
                                 "excluded from quantization, so its weight is a float tensor")
            linear_weight_loader(pspec)(layer.weight_plain, tensor, p_index[shard])
            return
        check_dtype(tensor, PACKED, "packed weight")
        linear_weight_loader(qspec)(param, tensor, q_index.get(shard, shard))

    packed = set_weight_attrs(_empty((n_q, k // 2), PACKED), weight_loader=weight_loader,
                              output_dim=0, input_dim=1)
    setattr(layer, names["weight"], packed)
    scales = set_weight_attrs(_empty((n_q, k // BLOCK), SCALE),
                              weight_loader=_checked(linear_weight_loader(qspec), SCALE, "block scale",
                                                     q_index),
                              output_dim=0, input_dim=1, checkpoint_shards=quantized)
    setattr(layer, names["weight_scale"], scales)
    roles = ["weight_scale_2"] + (["input_scale"] if fmt.has_input_scale else [])
    for role in roles:
        setattr(layer, names[role], set_weight_attrs(
            _empty((len(quantized),), GLOBAL), weight_loader=_partition_scalar_loader(q_index, role),
            checkpoint_shards=quantized))
    if fmt.kv_cache_fp8 and len(spec.shard_names) == 3 and spec.shard_names[1].endswith("k_proj"):
        for name, shard in (("k_scale", 1), ("v_scale", 2)):
            setattr(layer, name, set_weight_attrs(_empty((1,), GLOBAL), weight_loader=_kv_scale_loader(name),
                                                  checkpoint_shards=(shard,)))


def _sub_spec(spec: LinearSpec, parts: tuple[int, ...]) -> LinearSpec:
    return replace(spec, output_sizes=tuple(spec.output_sizes[i] for i in parts),
                   shard_names=tuple(spec.shard_names[i] for i in parts))


def _checked(loader: Callable, dtype: torch.dtype, role: str, index: dict[int, int]) -> Callable:
    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | None = None) -> None:
        check_loaded(tensor, dtype, role)
        loader(param, tensor, index.get(0 if shard_id is None else shard_id, shard_id))

    return load


def _partition_scalar_loader(index: dict[int, int], role: str) -> Callable:
    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | None = None) -> None:
        value = scalar_of(tensor, role)
        with torch.no_grad():
            param.data[index[0 if shard_id is None else shard_id]] = value

    return load


def _kv_scale_loader(role: str) -> Callable:
    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: int | None = None) -> None:
        with torch.no_grad():
            param.data.copy_(scalar_of(tensor, role).reshape(1))

    return load


# -- experts ---------------------------------------------------------------------------------------


def create_moe_params(layer: nn.Module, spec: MoESpec, fmt: CheckpointFormat) -> None:
    """Stacked NVFP4 experts: ``w13_*`` (gate | up) and ``w2_*`` (down), per expert
    ``weight`` (uint8), ``weight_scale`` (fp8), ``weight_scale_2`` and ``input_scale`` (fp32:
    w13 (E, 2) gate and up, w2 (E,))."""
    names = fmt.names
    e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size_per_partition
    for k_in, what in ((h, "hidden size"), (i, "intermediate size per rank")):
        if k_in % BLOCK:
            raise ValueError(f"experts {spec.prefix!r}: {what} {k_in} is not a multiple of {BLOCK}; "
                             "NVFP4 cannot store these experts")
    generic = moe_weight_loader(spec)
    for prefix, rows, cols in (("w13_", 2 * i, h), ("w2_", h, i)):
        for role, width, dtype in (("weight", cols // 2, PACKED), ("weight_scale", cols // BLOCK, SCALE)):
            param = set_weight_attrs(_empty((e, rows, width), dtype),
                                     weight_loader=_checked_moe(generic, dtype, role), output_dim=0, input_dim=1)
            setattr(layer, prefix + names[role], param)
        roles = ["weight_scale_2"] + (["input_scale"] if fmt.has_input_scale else [])
        for role in roles:
            shape = (e, 2) if prefix == "w13_" else (e,)
            setattr(layer, prefix + names[role], set_weight_attrs(
                _empty(shape, GLOBAL), weight_loader=_expert_scalar_loader(role)))


def _checked_moe(loader: Callable, dtype: torch.dtype, role: str) -> Callable:
    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: str, expert_id: int) -> None:
        check_loaded(tensor, dtype, role)
        loader(param, tensor, shard_id, expert_id)

    return load


def _expert_scalar_loader(role: str) -> Callable:
    def load(param: torch.Tensor, tensor: torch.Tensor, shard_id: str, expert_id: int) -> None:
        value = scalar_of(tensor, role)
        if not 0 <= expert_id < param.shape[0]:
            raise ValueError(f"expert {expert_id} is out of range ({param.shape[0]} experts)")
        with torch.no_grad():
            if param.dim() == 2:
                param.data[expert_id, 0 if shard_id == "w1" else 1] = value
            else:
                param.data[expert_id] = value

    return load
