"""torch's intra-op thread count on CPU, chosen once when an engine starts.

Precedence: ``EngineConfig.cpu_threads`` (``--cpu-threads``, ``HINGE_CPU_THREADS``, YAML) > an
explicit ``OMP_NUM_THREADS`` > the auto rule. Auto keeps one core for the host threads (the engine
loop's Python, the tokenizer, the server's event loop, other processes) and caps the team at
``MAX_AUTO_THREADS``: ``min(MAX_AUTO_THREADS, max(1, cores - 1))``, so a 2-core machine runs one
thread. On the 2-core development machine, 128 decode tokens took 0.44-0.51 s with one thread
whether or not another process was busy, and 0.46-0.49 s with two threads when idle but 2.2-7.8 s
when another process competed for a core (an OpenMP team that loses a core waits at every
barrier); docs/internals.md has the table. On ``cuda`` auto leaves torch's own choice (the host
side does little arithmetic there); an explicit count applies on every device.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hinge.config import EngineConfig

#: the largest team the auto rule picks (a judgment, not measured here: single-stream decode of
#: the small models hinge runs on CPU gains little past a few threads and pays a barrier per op)
MAX_AUTO_THREADS = 8


@dataclass(frozen=True)
class ThreadChoice:
    """What ``apply_cpu_threads`` set, and why."""

    count: int | None  #: threads set with torch.set_num_threads; None = torch's default left alone
    source: str  #: "cpu_threads", "OMP_NUM_THREADS", "auto" or "torch default"
    reason: str  #: one line for the start-up banner

    def describe(self, actual: int) -> str:
        """``1 (auto: 2 usable cores, one kept for host threads)``, with torch's actual count."""
        return f"{actual} ({self.source}: {self.reason})"


def choose_cpu_threads(configured: int | None, env: Mapping[str, str], cores: int,
                       device: str = "cpu") -> ThreadChoice:
    """The thread count for an engine; a pure function of its inputs.

    :param configured: ``EngineConfig.cpu_threads`` (None = auto).
    :param env: the environment (only ``OMP_NUM_THREADS`` is read; empty or not a positive
        integer counts as unset).
    :param cores: the cores this process may use (``usable_cores()``).
    :param device: ``cpu`` or ``cuda``; auto on cuda leaves torch's default.
    """
    if configured is not None:
        return ThreadChoice(configured, "cpu_threads", "set in the config / --cpu-threads")
    omp = _positive_int(env.get("OMP_NUM_THREADS", "").split(",")[0])
    if omp is not None:
        return ThreadChoice(omp, "OMP_NUM_THREADS", "set in the environment")
    if device != "cpu":
        return ThreadChoice(None, "torch default", f"auto leaves torch's choice on {device}")
    count = min(MAX_AUTO_THREADS, max(1, cores - 1))
    kept = "one kept for host threads" if cores > 1 else "the only one"
    capped = f", capped at {MAX_AUTO_THREADS}" if cores - 1 > MAX_AUTO_THREADS else ""
    return ThreadChoice(count, "auto", f"{cores} usable core{'s' if cores != 1 else ''}, {kept}{capped}")


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, counted as physical cores when the
    topology is readable (SMT siblings share one core's arithmetic), and no more than a cgroup
    CPU quota (containers)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    count = len(cpus) or os.cpu_count() or 1
    physical = _physical_cores(cpus)
    if physical:
        count = min(count, physical)
    quota = _cgroup_quota()
    return max(1, min(count, quota) if quota else count)


def apply_cpu_threads(config: EngineConfig, env: Mapping[str, str] | None = None) -> ThreadChoice:
    """Choose (``choose_cpu_threads``) and set torch's intra-op thread count for this process."""
    import torch

    env = os.environ if env is None else env
    choice = choose_cpu_threads(config.cpu_threads, env, usable_cores(), config.device)
    if choice.count is not None and torch.get_num_threads() != choice.count:
        torch.set_num_threads(choice.count)
    return choice


def _positive_int(text: str) -> int | None:
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _physical_cores(cpus: list[int]) -> int | None:
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topo.joinpath("physical_package_id").read_text().strip(),
                       topo.joinpath("core_id").read_text().strip()))
        except OSError:
            return None
    return len(cores) or None


def _cgroup_quota() -> int | None:
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))
