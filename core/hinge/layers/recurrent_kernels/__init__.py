"""Recurrent-state kernels behind one interface: ``torch`` (reference) and ``fla`` (CUDA)."""

from __future__ import annotations

from hinge.layers.recurrent_kernels.base import ConvResult, DeltaRuleResult, RecurrentKernels
from hinge.layers.recurrent_kernels.torch_ref import TorchRecurrentKernels

KERNEL_NAMES = ("auto", "torch", "fla")


def get_recurrent_kernels(
    device: str, name: str = "auto", *, deterministic: bool = False
) -> RecurrentKernels:
    """``auto``: fla on CUDA when fla-core imports, else torch. Never imports fla on CPU.

    ``deterministic`` (batch- and chunking-invariant bits) is the exact token recurrence: one
    Triton kernel on CUDA (``delta_rule_triton``), the torch reference's token loop elsewhere;
    fla's kernels are not batch invariant.
    """
    if name not in KERNEL_NAMES:
        raise ValueError(
            f"unknown recurrent kernels {name!r}; choose one of {', '.join(KERNEL_NAMES)}"
        )
    if deterministic:
        if name == "fla":
            raise ValueError(
                "recurrent kernels 'fla' are not batch invariant; deterministic mode uses 'torch' "
                "(pass name='auto' or 'torch')"
            )
        return TorchRecurrentKernels(deterministic=True)
    if name == "torch" or (name == "auto" and not str(device).startswith("cuda")):
        return TorchRecurrentKernels()
    if name == "fla" and not str(device).startswith("cuda"):
        raise ValueError(f"recurrent kernels 'fla' need a CUDA device, got {device!r}; use 'torch'")
    from hinge.layers.recurrent_kernels.fla_kernels import FlaRecurrentKernels

    if name == "fla":
        return FlaRecurrentKernels()
    try:
        return FlaRecurrentKernels()
    except ImportError:
        return TorchRecurrentKernels()


__all__ = [
    "ConvResult",
    "DeltaRuleResult",
    "RecurrentKernels",
    "TorchRecurrentKernels",
    "get_recurrent_kernels",
]
