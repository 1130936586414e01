"""Availability: whether a component can run on this machine, and if not, why.

Capabilities say what a component supports in general (devices, compute capability, dtypes);
a spec's ``availability`` check says what only this machine can answer: a package missing, an
import failing, a GPU generation the kernels do not cover. The check runs at plan time and for
``hinge plugins``, never per step:

    availability(machine: Machine) -> str | None      # None = available; else the reason

Given as a callable or a ``"module:attr"`` string (imported when asked, like a factory), it must
be cheap and must not import kernels or initialise CUDA: ``Machine`` already holds what torch
reports. ``unavailable_reason`` adds the generic reasons that follow from the capabilities (a
CUDA-only component on a machine without CUDA, a compute capability below the minimum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hinge.plugins.specs import ComponentSpec


@dataclass(frozen=True)
class Machine:
    """What an availability check is told about the machine the engine would run on."""

    device: str  #: the device asked for: ``cpu`` or ``cuda``
    cuda_available: bool  #: torch sees a CUDA device
    #: compute capability of CUDA device 0, e.g. (9, 0) for an H100/H200; None without CUDA
    compute_capability: tuple[int, int] | None = None

    @property
    def cuda_note(self) -> str:
        """``CUDA 9.0`` or ``no CUDA device`` (for reasons)."""
        if not self.cuda_available:
            return "no CUDA device (torch sees none)"
        cc = self.compute_capability
        return f"CUDA compute capability {cc[0]}.{cc[1]}" if cc else "a CUDA device"


def probe_machine(device: str | None = None,
                  compute_capability: tuple[int, int] | None = None) -> Machine:
    """This machine as torch sees it. ``device`` None = cuda when torch sees one, else cpu.
    Asking the compute capability initialises CUDA; pass it when it is known."""
    import torch

    cuda = torch.cuda.is_available()
    if cuda and compute_capability is None:
        compute_capability = tuple(torch.cuda.get_device_capability())  # type: ignore[assignment]
    return Machine(device or ("cuda" if cuda else "cpu"), cuda,
                   compute_capability if cuda else None)


def generic_reason(spec: ComponentSpec, machine: Machine) -> str | None:
    """Why the declared capabilities exclude this machine (devices, compute capability), or None."""
    caps = spec.capabilities
    if "cuda" not in caps.devices and "cpu" in caps.devices:
        return None
    if "cpu" not in caps.devices and not machine.cuda_available:
        return f"runs on {', '.join(sorted(caps.devices))} only and this machine has {machine.cuda_note}"
    need = caps.min_compute_capability
    cc = machine.compute_capability
    if need and cc and tuple(cc) < tuple(need) and "cpu" not in caps.devices:
        return f"needs CUDA compute capability >= {need[0]}.{need[1]}, this GPU has {cc[0]}.{cc[1]}"
    return None


def check_reason(spec: ComponentSpec, machine: Machine) -> str | None:
    """The spec's own ``availability`` check (None when it has none); a check that raises is a
    reason too, naming the exception."""
    check = spec.availability
    if check is None:
        return None
    try:
        fn = spec.load_availability()
        reason = fn(machine)
    except Exception as exc:  # noqa: BLE001 - a broken check makes the component unavailable
        return f"its availability check {check!r} raised {type(exc).__name__}: {exc}"
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        return f"its availability check {check!r} returned {reason!r} (expected None or a reason)"
    return reason


def unavailable_reason(spec: ComponentSpec, machine: Machine) -> str | None:
    """Why ``spec`` cannot run on ``machine``: the generic reason first, else its own check."""
    return generic_reason(spec, machine) or check_reason(spec, machine)
