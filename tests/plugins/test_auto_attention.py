"""``attention: auto`` (the default): flashinfer on CUDA when it imports and suits the model,
else the built-in Triton kernels, else the torch reference, with the reason in the plan; torch on
CPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from hinge.config import load_config
from hinge.plugins import auto_attention
from hinge.plugins.auto_attention import import_problem
from hinge.plugins.plan import PlanError, resolve_plan

H200 = (9, 0)
MODEL = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 256}


def plan(make_pm, model=MODEL, **overrides):
    overrides.setdefault("cache", "none")  # NOTE: no entry point is loaded; the default radix is a plugin
    config = load_config(env={}, overrides=overrides)
    return resolve_plan(config, make_pm(), dict(model), device_capability=H200)


@pytest.fixture
def flashinfer_imports(monkeypatch):
    monkeypatch.setattr(auto_attention, "import_problem", lambda module: None)


@pytest.fixture
def flashinfer_missing(monkeypatch):
    monkeypatch.setattr(auto_attention, "import_problem",
                        lambda module: f"{module} is not installed (pip package flashinfer-python)"
                        if module == "flashinfer" else None)


@pytest.fixture
def no_gpu_kernels(monkeypatch):
    monkeypatch.setattr(auto_attention, "import_problem",
                        lambda module: f"{module} is not installed")


def test_the_config_default_is_auto():
    assert load_config(env={}).attention == "auto"


def test_auto_on_cpu_is_the_torch_reference(make_pm):
    p = plan(make_pm, device="cpu")
    assert p.attention.name == "torch" and p.config.attention == "torch"
    assert p.notes == ("attention = auto -> torch (first choice on cpu)",)


def test_auto_on_cuda_is_flashinfer_when_it_imports(make_pm, flashinfer_imports):
    p = plan(make_pm, device="cuda")
    assert p.attention.name == "flashinfer" and p.dtype == "bfloat16"
    assert "attention = auto -> flashinfer (first choice on cuda)" in p.describe()
    assert p.to_dict()["notes"] == ["attention = auto -> flashinfer (first choice on cuda)"]


def test_auto_on_cuda_without_flashinfer_is_triton_and_says_what_to_install(make_pm, flashinfer_missing):
    p = plan(make_pm, device="cuda")
    assert p.attention.name == "triton"
    assert p.notes == ("attention = auto -> triton (skipped flashinfer: flashinfer is not installed "
                       "(pip package flashinfer-python))",)


def test_auto_on_cuda_without_flashinfer_or_triton_is_torch(make_pm, no_gpu_kernels):
    p = plan(make_pm, device="cuda")
    assert p.attention.name == "torch"
    assert p.notes == ("attention = auto -> torch (skipped flashinfer: flashinfer is not installed; "
                       "triton: triton is not installed)",)


def test_auto_in_deterministic_mode_on_cuda_is_the_batch_invariant_triton_backend(
        make_pm, flashinfer_imports):
    p = plan(make_pm, device="cuda", deterministic=True)
    assert p.attention.name == "triton"
    (note,) = p.notes
    assert note.startswith("attention = auto -> triton (skipped flashinfer: ")
    assert "is not batch invariant" in note


@pytest.mark.parametrize("overrides, model, reason", [
    ({"dtype": "float32"}, MODEL, "does not support dtype float32"),
    ({"deterministic": True}, MODEL, "is not batch invariant"),
    ({}, {**MODEL, "head_dim": 16}, "does not support head_dim 16"),
])
def test_auto_on_cuda_passes_over_flashinfer_when_the_plan_with_it_is_invalid(
        make_pm, flashinfer_imports, overrides, model, reason):
    p = plan(make_pm, model=model, device="cuda", **overrides)
    assert p.attention.name in ("triton", "torch")
    note = p.notes[0]
    assert note.startswith(f"attention = auto -> {p.attention.name} (skipped flashinfer: ")
    assert reason in note


def test_attention_options_go_to_the_backend_auto_chose(make_pm, flashinfer_imports):
    p = plan(make_pm, device="cuda", attention_options={"backend": "fa3"})
    assert p.attention.options.backend == "fa3"


def test_an_explicit_attention_backend_carries_no_auto_note(make_pm, flashinfer_imports):
    p = plan(make_pm, device="cuda", attention="torch")
    assert p.attention.name == "torch" and p.notes == ()


def test_when_no_candidate_works_the_error_also_names_what_auto_skipped(make_pm, no_gpu_kernels):
    with pytest.raises(PlanError) as err:
        plan(make_pm, device="cuda", attention_options={"backend": "fa2"})
    message = str(err.value)
    assert "attention backend 'torch' takes no options, got: backend" in message
    assert message.endswith("(attention = auto skipped flashinfer: flashinfer is not installed; "
                            "triton: triton is not installed)")


def test_import_problem_names_a_missing_module_and_a_failing_import(tmp_path, monkeypatch):
    assert import_problem("hinge_no_such_module") == "hinge_no_such_module is not installed"
    (tmp_path / "hinge_broken_kernels.py").write_text("raise RuntimeError('no CUDA driver')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_problem("hinge_broken_kernels") == (
        "import hinge_broken_kernels failed: RuntimeError: no CUDA driver")


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is here")
def test_hinge_plan_for_cuda_here_shows_why_auto_passed_over_flashinfer():
    run = subprocess.run([sys.executable, "-m", "hinge.cli", "plan", "--device", "cuda"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    chosen = "triton" if importlib.util.find_spec("triton") is not None else "torch"
    assert (f"attention = auto -> {chosen} (skipped flashinfer: flashinfer is not installed (pip "
            "package flashinfer-python, in hinge-llm's gpu extra)") in run.stdout
