"""Programmatic dependent launch from the core's fast kernels (``hinge.devices.early_dependents``):
compiled for sm_90 (on the CPU: Triton compiles without a GPU), ``add_rmsnorm`` and ``silu_mul``
trigger their dependents (``griddepcontrol.launch_dependents``) exactly when asked; they and
``qk_norm_rope``, launched early themselves, wait for the kernel before them
(``griddepcontrol.wait``) before any load or store, as does ``kv_write``, and are launched with the attribute exactly
when asked; the switch is on for Hopper and later unless ``$HINGE_PDL`` is 0, and never on a CPU."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from hinge import devices  # noqa: E402
from hinge.layers.fast_triton import add_rmsnorm, kv_write, qk_norm_rope, silu_mul  # noqa: E402

KERNELS = {
    "silu_mul": (silu_mul._silu_mul_kernel,
                 {"gu_ptr": "*bf16", "out_ptr": "*bf16", "inter": "i32", "stride_gu": "i32",
                  "stride_out": "i32"}, {"BLOCK": 1024}),
    "add_rmsnorm": (add_rmsnorm._add_rmsnorm_kernel,
                    {**{p: "*bf16" for p in ("x_ptr", "r_ptr", "w_ptr", "out_ptr", "res_ptr")},
                     **{p: "i32" for p in ("D", "stride_x", "stride_r", "stride_out", "stride_res")},
                     "eps": "fp32", "offset": "fp32"}, {"BLOCK_D": 4096, "HAS_OFFSET": False}),
    "qk_norm_rope": (qk_norm_rope._qk_norm_rope_kernel,
                     {**{p: "*bf16" for p in ("q_ptr", "k_ptr", "qw_ptr", "kw_ptr", "cos_ptr", "sin_ptr",
                                             "qo_ptr", "ko_ptr")},
                      **{p: "i32" for p in ("HQ", "D", "R", "stride_qt", "stride_qh", "stride_kt",
                                            "stride_kh", "stride_ct", "stride_st", "stride_qot",
                                            "stride_kot")},
                      "eps": "fp32", "offset": "fp32"}, {"BLOCK_D": 128, "HAS_OFFSET": False}),
    "kv_write": (kv_write._kv_write_kernel,
                 {**{p: "*bf16" for p in ("k_ptr", "v_ptr", "kc_ptr", "vc_ptr")}, "loc_ptr": "*i64",
                  **{p: "i32" for p in ("stride_kt", "stride_kh", "stride_vt", "stride_vh", "width")}},
                 {"D": 128, "BLOCK": 1024}),
}
TRIGGERS = ("silu_mul", "add_rmsnorm", "qk_norm_rope")  #: those whose next kernel launches early
FLAG = {"qk_norm_rope": "EARLY", "kv_write": "EARLY"}  #: the constexpr where not EARLY_DEPENDENTS


def compiled(name: str, early: bool, what: str = "ptx"):
    kernel, signature, constants = KERNELS[name]
    constants = {**constants, FLAG.get(name, "EARLY_DEPENDENTS"): early}
    source = ASTSource(fn=kernel, signature={**signature, **dict.fromkeys(constants, "constexpr")},
                       constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm[what]


def ptx(name: str, early: bool) -> str:
    return compiled(name, early)


def sass(name: str, tmp_path) -> str | None:
    """The early build's SASS through Triton's cuobjdump, or None where it has none."""
    import os
    import subprocess

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return None
    cubin = tmp_path / f"{name}.cubin"
    cubin.write_bytes(compiled(name, True, "cubin"))
    return subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name", TRIGGERS)
def test_a_fast_kernel_before_a_gemm_triggers_its_dependents_only_when_asked(name):
    assert "griddepcontrol.launch_dependents" in ptx(name, True)
    assert "griddepcontrol" not in ptx(name, False)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_an_early_launched_fast_kernel_waits_for_the_kernel_before_it_before_any_memory_access(name, tmp_path):
    code = ptx(name, True)
    wait = code.index("griddepcontrol.wait")
    for op in ("ld.global", "st.global", "atom."):
        assert op not in code[:wait], (name, op)
    assert code.count("griddepcontrol.wait") == 1
    assert name in TRIGGERS or "launch_dependents" not in code
    machine = sass(name, tmp_path)  # ptxas must not move a load above the wait (ACQBULK) either
    if machine is not None:
        before = machine[:machine.index("ACQBULK")]
        assert not [op for op in ("LDG", "STG", "ATOM", "RED.") if op in before], name


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_fast_kernels_are_launched_with_the_attribute_exactly_when_early_dependents_says(name, monkeypatch):
    import torch

    seen = []

    class Grid:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.append((kwargs["launch_pdl"], kwargs[FLAG.get(name, "EARLY_DEPENDENTS")]))
            return launch

    module = {"silu_mul": silu_mul, "add_rmsnorm": add_rmsnorm, "qk_norm_rope": qk_norm_rope,
              "kv_write": kv_write}[name]
    kernel_name = next(k for k in vars(module) if k.startswith("_") and k.endswith("_kernel"))
    monkeypatch.setattr(module, kernel_name, Grid(getattr(module, kernel_name)))
    for early in (True, False):
        monkeypatch.setattr(module, "early_dependents", lambda device, early=early: early)
        x = torch.zeros(1, 2, 128)
        if name == "silu_mul":
            module.silu_mul(x)
        elif name == "add_rmsnorm":
            module.add_rmsnorm(x, x, torch.ones(128), 1e-6)
        elif name == "kv_write":
            module.kv_write(torch.zeros(4, 2, 128), torch.zeros(4, 2, 128), torch.zeros(1, dtype=torch.long),
                            x, x)
        else:
            module.qk_norm_rope(x, x, torch.ones(128), torch.ones(128), 1e-6, torch.ones(1, 1, 128),
                                torch.zeros(1, 1, 128))
    assert seen == [(True, True), (False, False)]


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
