"""``attention: auto`` (the default): the first backend of a per-device preference list whose
kernels import on this machine and whose plan is valid, with the reason each one before it was
passed over (shown by ``hinge plan``, logged at start-up, in ``/server_info``).

On CUDA that is flashinfer, else the built-in Triton kernels (flashinfer missing or failing to
import, a dtype, head dim or deterministic setting it does not support: deterministic mode gets
Triton's batch-invariant attention), else the torch reference; on CPU the torch reference.
Imports no component: the kernel module of a candidate is only looked up, and imported to prove
it loads, when the plan is for that device.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.plugins.manager import PluginManager
    from hinge.plugins.plan import ResolvedPlan

AUTO = "auto"

#: what to install when a candidate's kernel module is missing
INSTALL_HINTS = {"flashinfer": "pip package flashinfer-python, in hinge-llm's gpu extra"}

#: device -> (attention backend, the module its kernels need or None), in order of preference
PREFERENCES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "cuda": (("flashinfer", "flashinfer"), ("triton", "triton"), ("torch", None)),
    "cpu": (("torch", None),),
}


@cache
def import_problem(module: str) -> str | None:
    """Why ``module`` cannot be used here (not installed, or its import fails), or None."""
    if importlib.util.find_spec(module) is None:
        hint = INSTALL_HINTS.get(module)
        return f"{module} is not installed" + (f" ({hint})" if hint else "")
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure disqualifies the candidate
        return f"import {module} failed: {type(exc).__name__}: {exc}"
    return None


def _plan_reasons(exc: Exception) -> str:
    lines = [line.strip()[2:] for line in str(exc).splitlines() if line.strip().startswith("- ")]
    return "; ".join(lines) or str(exc).splitlines()[0]


def choose_attention(config: EngineConfig, pm: PluginManager,
                     resolve: Callable[[EngineConfig], ResolvedPlan]) -> ResolvedPlan:
    """Resolve the plan for the first usable candidate of ``config.device`` (``resolve`` is
    ``resolve_plan`` for a config naming one backend); its ``notes`` say why."""
    from hinge.plugins.plan import PlanError
    from hinge.plugins.specs import OptionsError

    installed = set(pm.names("attention"))
    passed: list[str] = []
    candidates = PREFERENCES[config.device]
    for name, module in candidates:
        problem = None if name in installed else "not registered"
        if problem is None and module is not None:
            problem = import_problem(module)
        if problem is None:
            try:
                plan = resolve(config.model_copy(update={"attention": name}))
            except (PlanError, OptionsError) as exc:
                if name == candidates[-1][0]:
                    if not passed:
                        raise
                    raise PlanError(f"{exc} (attention = auto skipped {'; '.join(passed)})") from None
                problem = _plan_reasons(exc)
            else:
                why = f"skipped {'; '.join(passed)}" if passed else f"first choice on {config.device}"
                note = f"attention = auto -> {name} ({why})"
                return dataclasses.replace(plan, notes=(*plan.notes, note))
        passed.append(f"{name}: {problem}")
    raise PlanError("attention = auto found no usable backend on "
                    f"{config.device}: {'; '.join(passed)}; set attention explicitly")
