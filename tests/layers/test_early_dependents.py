"""Programmatic dependent launch from the core's fast kernels (``hinge.devices.early_dependents``):
compiled for sm_90 (on the CPU: Triton compiles without a GPU), ``add_rmsnorm`` and ``silu_mul``
trigger their dependents (``griddepcontrol.launch_dependents``) exactly when asked; the switch
is on for Hopper and later unless ``$HINGE_PDL`` is 0, and never on a CPU."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from hinge import devices  # noqa: E402
from hinge.layers.fast_triton import add_rmsnorm, silu_mul  # noqa: E402

KERNELS = {
    "silu_mul": (silu_mul._silu_mul_kernel,
                 {"gu_ptr": "*bf16", "out_ptr": "*bf16", "inter": "i32", "stride_gu": "i32",
                  "stride_out": "i32"}, {"BLOCK": 1024}),
    "add_rmsnorm": (add_rmsnorm._add_rmsnorm_kernel,
                    {**{p: "*bf16" for p in ("x_ptr", "r_ptr", "w_ptr", "out_ptr", "res_ptr")},
                     **{p: "i32" for p in ("D", "stride_x", "stride_r", "stride_out", "stride_res")},
                     "eps": "fp32", "offset": "fp32"}, {"BLOCK_D": 4096, "HAS_OFFSET": False}),
}


def ptx(name: str, early: bool) -> str:
    kernel, signature, constants = KERNELS[name]
    constants = {**constants, "EARLY_DEPENDENTS": early}
    source = ASTSource(fn=kernel, signature={**signature, **dict.fromkeys(constants, "constexpr")},
                       constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_fast_kernel_before_a_gemm_triggers_its_dependents_only_when_asked(name):
    assert "griddepcontrol.launch_dependents" in ptx(name, True)
    assert "griddepcontrol" not in ptx(name, False)


def test_early_dependents_is_on_for_hopper_unless_the_variable_is_0_and_never_on_a_cpu(monkeypatch):
    capabilities = {"cuda": (9, 0), "cuda:1": (8, 9)}
    monkeypatch.setattr(devices, "_compute_capability",
                        lambda device: capabilities.get(str(device), (0, 0)))
    monkeypatch.delenv(devices.PDL_ENV, raising=False)
    assert devices.early_dependents("cuda") and not devices.early_dependents("cuda:1")
    assert not devices.early_dependents("cpu")  # no CUDA device: nothing launches dependents
    monkeypatch.setenv(devices.PDL_ENV, "0")
    assert not devices.early_dependents("cuda")
    monkeypatch.setenv(devices.PDL_ENV, "1")
    assert devices.early_dependents("cuda") and not devices.early_dependents("cpu")
