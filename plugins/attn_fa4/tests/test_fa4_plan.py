"""fa4 as the plan sees it on this CPU machine: honest availability (no CUDA, the GPU
generation, flash-attn-4 missing), listed by `hinge plugins`, and a plan on an H200 where the
package is present: 128-token pages chosen, per-phase pairing with flashinfer, the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import hinge_fa4.availability as availability
from hinge.config import load_config
from hinge.plugins.availability import Machine
from hinge.plugins.manager import get_plugin_manager
from hinge.plugins.plan import PlanError, resolve_plan
from hinge_fa4 import FLASH_ATTN_4_VERSION
from hinge_fa4.availability import fa4_availability

H200 = (9, 0)
MODEL = {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096}


@pytest.fixture
def installed(monkeypatch):
    """flash-attn-4 as the gpu extra installs it (never really installed on this machine)."""
    monkeypatch.setattr(availability, "installed_version", lambda: FLASH_ATTN_4_VERSION)


def plan(model=MODEL, **overrides):
    overrides.setdefault("cache", "none")
    overrides.setdefault("device", "cuda")
    config = load_config(env={}, overrides=overrides)
    return resolve_plan(config, get_plugin_manager(), dict(model), device_capability=H200)


def test_flash_attn_4_is_not_installed_on_the_cpu_test_machine():
    assert availability.installed_version() is None, (
        "flash-attn-4 must never be installed here: transformers would route CPU code to it")


def test_without_the_package_the_reason_says_what_to_install():
    reason = fa4_availability(Machine("cuda", True, H200))
    assert reason == ("flash-attn-4 is not installed; install hinge-llm's gpu extra (pip install -c "
                      f"constraints.txt -e \".[gpu]\", which pins flash-attn-4=={FLASH_ATTN_4_VERSION})")


@pytest.mark.parametrize("cc, ok", [((9, 0), True), ((10, 0), True), ((11, 0), True),
                                    ((12, 0), False), ((8, 9), False)])
def test_gpu_generations_with_paged_kv_kernels(installed, cc, ok):
    reason = fa4_availability(Machine("cuda", True, cc))
    assert (reason is None) == ok
    if not ok:
        assert reason.startswith("FA4's paged-KV kernels run on sm_90 (Hopper) and sm_100/sm_110")


def test_selecting_fa4_without_the_package_gives_that_reason():
    with pytest.raises(PlanError) as err:
        plan(attention="fa4")
    assert "attention backend 'fa4' (fa4) cannot run here: flash-attn-4 is not installed" in str(err.value)


def test_selecting_fa4_on_cpu_says_it_runs_on_cuda():
    with pytest.raises(PlanError, match="attention backend 'fa4' \\(fa4\\) does not run on cpu; it supports cuda"):
        plan(attention="fa4", device="cpu")


def test_hinge_plugins_lists_fa4_ok_and_unavailable_here_with_the_reason():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    run = subprocess.run([sys.executable, "-m", "hinge.cli", "plugins", "--json"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    (fa4,) = [p for p in json.loads(run.stdout) if p["name"] == "fa4"]
    assert fa4["status"] == "ok" and fa4["distribution"] == "hinge-llm"
    (component,) = fa4["components"]
    assert component["name"] == "fa4" and component["available"] is False
    assert component["unavailable_reason"] == ("runs on cuda only and this machine has no CUDA device "
                                               "(torch sees none)")
    caps = component["capabilities"]
    assert caps["page_sizes"] == [128] and caps["preferred_page_sizes"] == [128]
    assert caps["logit_softcap"] and caps["sliding_window"] and not caps["batch_invariant"]


def test_on_an_h200_fa4_gets_128_token_pages(installed):
    p = plan(attention="fa4")
    assert p.attention.name == "fa4" and p.config.page_size == 128 and p.dtype == "bfloat16"
    assert "page_size = 128 (preferred by fa4; the cuda default is 16)" in p.notes
    assert p.graphs["decode"].enabled and p.graphs["prefill"].enabled


def test_fa4_for_prefill_and_flashinfer_for_decode_share_128_token_pages(installed, monkeypatch):
    import hinge.plugins.auto_attention as auto

    monkeypatch.setattr(auto, "import_problem", lambda module: None)
    p = plan(attention_prefill="fa4", attention_decode="flashinfer")
    assert (p.attention.name, p.attention_decode.name, p.config.page_size) == ("fa4", "flashinfer", 128)


def test_an_explicit_page_size_fa4_cannot_take_is_refused(installed):
    with pytest.raises(PlanError, match="'fa4' \\(fa4\\) does not support page_size 16; it supports 128"):
        plan(attention="fa4", page_size=16)


def test_deterministic_mode_refuses_fa4_as_not_batch_invariant(installed):
    with pytest.raises(PlanError, match="deterministic = true but attention backend 'fa4' \\(fa4\\) is not batch invariant"):
        plan(attention="fa4", deterministic=True)


def test_a_head_dim_fa4_does_not_claim_is_refused(installed):
    with pytest.raises(PlanError, match="'fa4' \\(fa4\\) does not support head_dim 80"):
        plan(model={**MODEL, "head_dim": 80}, attention="fa4")


def test_a_capped_model_with_a_sliding_window_plans_on_fa4(installed):
    p = plan(model={**MODEL, "attn_logit_softcapping": 50.0, "sliding_window": 4096}, attention="fa4")
    assert p.attention.name == "fa4"


def test_float32_is_refused_with_the_fix(installed):
    with pytest.raises(PlanError, match="does not support dtype float32; it supports bfloat16, float16"):
        plan(attention="fa4", dtype="float32")


def test_importing_the_plugin_and_asking_availability_import_no_kernel():
    code = ("import sys; import hinge_fa4.plugin, hinge_fa4.availability as a; "
            "from hinge.plugins.availability import Machine; a.fa4_availability(Machine('cuda', True, (9, 0))); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flash_attn', 'cutlass', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
