"""Linear layers whose weights and matmul belong to the quantizer (``hinge.contracts.Quantizer``).

A ``Linear`` is described by a ``LinearSpec``: one GEMM over one or more checkpoint linears
stacked along the output (``qkv_proj`` = q_proj | k_proj | v_proj, ``gate_up_proj`` = gate_proj |
up_proj), split over tensor-parallel ranks by column or row. The model loader reads its
``checkpoint_routes``: which checkpoint tensor loads into which parameter, as which partition.

Unquantized linears (the built-in ``none`` quantizer, default mode, no bias) on CUDA may run at
most ``fast_triton.gemv.MAX_ROWS`` rows (decode) through the Triton GEMV
(``hinge.layers.fast_triton.gemv``) when ``HINGE_FAST_GEMV=1`` (off by default: slower than
cuBLAS where measured); every other case is ``quantizer.apply``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from hinge.contracts import LinearSpec
from hinge.layers import fast_triton

if TYPE_CHECKING:
    from hinge.contracts import Quantizer


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in a tensor-parallel group (``BuildContext.rank`` / ``world_size``)."""

    rank: int = 0
    world_size: int = 1

    def split(self, size: int, what: str) -> int:
        """``size // world_size``; a clear error when ``what`` (e.g. a config field) does not split."""
        if size % self.world_size:
            raise ValueError(f"{what} = {size} does not split over tensor-parallel world_size "
                             f"{self.world_size}; choose a world size that divides it")
        return size // self.world_size


SINGLE = TensorParallel()


@dataclass(frozen=True)
class Route:
    """Where one checkpoint tensor goes: a parameter (full name), a partition, an expert."""

    param: str
    shard_id: int | str | None = None
    expert_id: int | None = None


def join(module_name: str, name: str) -> str:
    """A tensor's full name under ``module_name`` (the root module has the empty name)."""
    return f"{module_name}.{name}" if module_name else name


def loadable(module: nn.Module) -> dict[str, torch.Tensor]:
    """A module's own parameters and persistent buffers (not its children's)."""
    out = dict(module.named_parameters(recurse=False))
    out.update((name, buf) for name, buf in module.named_buffers(recurse=False)
               if name not in module._non_persistent_buffers_set)
    return out


def _is_plain(quantizer: Quantizer) -> bool:
    """Whether ``quantizer`` is exactly the built-in ``none`` one in default mode: its ``apply`` is
    ``F.linear(x, weight, bias)``, so the fast GEMV may stand in for it. Any other quantizer
    (subclasses included) owns its matmul."""
    from hinge.builtin.no_quant import NoQuantizer  # here, not at import: builtin imports layers

    return type(quantizer) is NoQuantizer and not quantizer.deterministic


class Linear(nn.Module):
    """``y = x W^T (+ b)`` over a ``LinearSpec``; ``quantizer.create_weights`` makes the parameters.

    ``Linear(in, out, bias, quantizer, dtype, prefix)`` is one replicated checkpoint linear;
    ``output_sizes`` (a sequence) with ``shard_names`` fuses several, ``parallel`` and ``tp``
    split it over ranks. ``prefix`` is the module name; partitions default to it as their
    checkpoint name.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int | Sequence[int],
        bias: bool,
        quantizer: Quantizer,
        dtype: torch.dtype,
        prefix: str = "",
        *,
        shard_names: Sequence[str] | None = None,
        parallel: str = "replicated",
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        sizes = (out_features,) if isinstance(out_features, int) else tuple(out_features)
        spec = LinearSpec(
            prefix=prefix, input_size=in_features, output_sizes=sizes,
            shard_names=tuple(shard_names) if shard_names is not None else (prefix,) * len(sizes),
            bias=bias, dtype=dtype, parallel=parallel, rank=tp.rank, world_size=tp.world_size,
        )
        self.spec = spec
        self.prefix = prefix
        self.in_features = spec.input_size_per_partition
        self.out_features = spec.output_size_per_partition
        self.quantizer = quantizer
        quantizer.create_weights(self, spec)
        self.plain = _is_plain(quantizer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plain and self.bias is None and fast_triton.gemv_enabled(x):
            gemv = fast_triton.kernels().gemv
            rows = x.reshape(-1, x.shape[-1])
            if gemv.supports(rows, self.weight):
                return gemv.gemv(rows, self.weight).reshape(*x.shape[:-1], self.weight.shape[0])
        return self.quantizer.apply(self, x)

    def gated(self, x: torch.Tensor, activation: str) -> torch.Tensor | None:
        """``act(gate) * up`` of this fused [gate | up] layer from its quantizer's fused path
        (``Quantizer.apply_gated``), or None where it has none for this call."""
        if self.plain:
            return None
        return self.quantizer.apply_gated(self, x, activation)

    def checkpoint_routes(self, module_name: str) -> dict[str, Route]:
        """``{checkpoint tensor name: Route}`` for every tensor the quantizer registered: tensor
        ``{shard_names[i]}.{name}`` loads into ``{module_name}.{name}`` as partition ``i`` (only
        the partitions the tensor's ``checkpoint_shards`` names, when it names some)."""
        spec, routes = self.spec, {}
        for name, tensor in loadable(self).items():
            if getattr(tensor, "weight_loader", None) is None and (
                len(spec.output_sizes) > 1 or spec.world_size > 1
            ):
                raise ValueError(
                    f"{module_name}.{name} has no weight_loader, but {module_name} is fused or sharded: "
                    f"{type(self.quantizer).__name__}.create_weights must attach one "
                    "(hinge.layers.weights.linear_parameter)"
                )
            shards = getattr(tensor, "checkpoint_shards", None)  # None: every partition
            for shard_id, shard_name in enumerate(spec.shard_names):
                if shards is None or shard_id in shards:
                    routes[f"{shard_name}.{name}"] = Route(join(module_name, name), shard_id)
        return routes

    def extra_repr(self) -> str:
        parts = f", partitions={self.spec.output_sizes}" if len(self.spec.output_sizes) > 1 else ""
        tp = f", {self.spec.parallel} {self.spec.rank}/{self.spec.world_size}" if self.spec.world_size > 1 else ""
        return f"in={self.in_features}, out={self.out_features}{parts}{tp}, prefix={self.prefix!r}"
