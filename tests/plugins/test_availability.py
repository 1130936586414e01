"""Availability: a component says at plan time that it cannot run on this machine, and why;
`hinge plugins` lists the reason and selecting the component gives it."""

from __future__ import annotations

import pytest
from plugin_fakes import in_process

from hinge import hookimpl
from hinge.config import load_config
from hinge.plugins import AttentionBackendSpec, AttentionCapabilities
from hinge.plugins.availability import Machine, generic_reason, unavailable_reason
from hinge.plugins.plan import PlanError, resolve_plan

H200 = (9, 0)
CUDA = frozenset({"cuda"})
asked: list[Machine] = []


def needs_kernels(machine: Machine) -> str | None:
    """A check as a plugin would write it: a package missing, a GPU generation not covered."""
    asked.append(machine)
    if machine.compute_capability and machine.compute_capability[0] >= 12:
        return f"kernels cover sm_90 and sm_100, not {machine.cuda_note}"
    return "acme-kernels is not installed (pip install acme-attn[gpu])"


def raises(machine: Machine) -> str | None:
    raise RuntimeError("driver query failed")


def spec(name, availability=None, **caps):
    caps.setdefault("devices", CUDA)
    return AttentionBackendSpec(name=name, factory=lambda o, b: None, availability=availability,
                                capabilities=AttentionCapabilities(**caps))


class Backends:
    def __init__(self, *specs):
        self.specs = specs

    @hookimpl
    def register_attention_backends(self, register):
        for s in self.specs:
            register(s)


def plan(make_pm, *specs, capability=H200, **overrides):
    overrides.setdefault("cache", "none")  # NOTE: no entry point is loaded; radix is a plugin
    overrides.setdefault("device", "cuda")
    config = load_config(env={}, overrides=overrides)
    return resolve_plan(config, make_pm(in_process("p", Backends(*specs), "acme")), {},
                        device_capability=capability)


def test_selecting_an_unavailable_backend_gives_its_reason(make_pm):
    asked.clear()
    with pytest.raises(PlanError) as err:
        plan(make_pm, spec("acme", needs_kernels), attention="acme")
    assert ("attention backend 'acme' (p) cannot run here: acme-kernels is not installed "
            "(pip install acme-attn[gpu])") in str(err.value)
    assert asked == [Machine("cuda", True, (9, 0))], "the check is told the plan's machine"


def test_the_check_sees_the_gpu_generation(make_pm):
    with pytest.raises(PlanError, match="kernels cover sm_90 and sm_100, not CUDA compute capability 12.0"):
        plan(make_pm, spec("acme", needs_kernels), attention="acme", capability=(12, 0))


def test_an_available_backend_plans(make_pm):
    p = plan(make_pm, spec("fine", lambda machine: None), attention="fine")
    assert p.attention.name == "fine"


def test_a_check_that_raises_makes_the_component_unavailable_and_says_so(make_pm):
    with pytest.raises(PlanError) as err:
        plan(make_pm, spec("acme", raises), attention="acme")
    assert "cannot run here: its availability check" in str(err.value)
    assert "raised RuntimeError: driver query failed" in str(err.value)


def test_a_check_returning_a_non_reason_is_reported():
    s = spec("acme", lambda machine: False)
    assert "returned False (expected None or a reason)" in unavailable_reason(s, Machine("cuda", True, H200))


def test_the_check_is_not_asked_when_the_device_already_rules_the_component_out(make_pm):
    asked.clear()
    with pytest.raises(PlanError) as err:
        plan(make_pm, spec("acme", needs_kernels), attention="acme", device="cpu")
    assert "does not run on cpu; it supports cuda" in str(err.value)
    assert "cannot run here" not in str(err.value) and asked == []


def test_the_check_may_be_a_module_attr_string():
    s = spec("acme", "test_availability:needs_kernels")
    assert unavailable_reason(s, Machine("cuda", True, H200)).startswith("acme-kernels is not installed")


def test_declared_devices_and_compute_capability_give_the_generic_reasons():
    cuda_only = spec("acme", min_compute_capability=(9, 0))
    assert generic_reason(cuda_only, Machine("cpu", False)) == (
        "runs on cuda only and this machine has no CUDA device (torch sees none)")
    assert generic_reason(cuda_only, Machine("cuda", True, (8, 0))) == (
        "needs CUDA compute capability >= 9.0, this GPU has 8.0")
    assert generic_reason(cuda_only, Machine("cuda", True, H200)) is None
    assert generic_reason(spec("both", devices=frozenset({"cpu", "cuda"})), Machine("cpu", False)) is None


def test_hinge_plugins_lists_every_components_availability(monkeypatch):
    """On this CPU machine the CUDA-only built-ins are listed as unavailable, with the reason."""
    import hinge.plugins.availability as availability
    from hinge.plugins_cli import cmd_plugins, plugin_listing

    monkeypatch.setattr(availability, "probe_machine", lambda device=None: Machine("cpu", False))
    config = load_config(env={}, overrides={"plugins": {"allow": []}})
    components = {(c["kind"], c["name"]): c for p in plugin_listing(config) for c in p["components"]}
    assert components[("attention", "torch")]["available"] is True
    assert components[("attention", "torch")]["unavailable_reason"] is None
    triton = components[("attention", "triton")]
    assert triton["available"] is False
    assert triton["unavailable_reason"] == "runs on cuda only and this machine has no CUDA device (torch sees none)"
    text = cmd_plugins(config=config)
    assert "unavailable here: runs on cuda only and this machine has no CUDA device" in text
