"""Whether fa4 can run on this machine (``AttentionBackendSpec.availability``): a GPU whose
FA4 kernels take a page table (sm_90, sm_100, sm_110) and the flash-attn-4 package installed.
Reads package metadata only: nothing is imported and CUDA is not touched."""

from __future__ import annotations

import importlib.metadata as md
from typing import TYPE_CHECKING

from hinge_fa4 import FLASH_ATTN_4_VERSION

if TYPE_CHECKING:
    from hinge.plugins.availability import Machine

#: CUDA major versions whose FA4 forward kernels read paged KV (interface.py: sm_80 and sm_120
#: assert ``page_table is None``)
PAGED_MAJORS = (9, 10, 11)
DISTRIBUTION = "flash-attn-4"


def installed_version() -> str | None:
    """The installed flash-attn-4 version, or None."""
    try:
        return md.version(DISTRIBUTION)
    except md.PackageNotFoundError:
        return None


def fa4_availability(machine: Machine) -> str | None:
    """None when fa4 can run here, else why (the GPU generation, the package)."""
    cc = machine.compute_capability
    if machine.device == "cuda" and cc is not None and cc[0] not in PAGED_MAJORS:
        return (f"FA4's paged-KV kernels run on sm_90 (Hopper) and sm_100/sm_110 (Blackwell); "
                f"this machine has {machine.cuda_note}")
    if installed_version() is None:
        return (f"{DISTRIBUTION} is not installed; install hinge-llm's gpu extra "
                f"(pip install -c constraints.txt -e \".[gpu]\", which pins "
                f"{DISTRIBUTION}=={FLASH_ATTN_4_VERSION})")
    return None
