"""tools/gpu/step_profile.py: kernel names fall in the kind a decode-step breakdown reports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import step_profile  # noqa: E402


@pytest.mark.parametrize("name, kind", [
    ("nvjet_tst_128x64_64x8_2x1_v_bz_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "gemm"),
    ("_gemv_kernel", "gemm"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>", "attention"),
    ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90", "attention"),
    ("_add_rmsnorm_kernel", "norm"),
    ("_decode_in_pool_kernel", "recurrent"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "copy"),
    ("void at::native::reduce_kernel<512, 1, at::native::ArgMaxOps<float>>", "sampling"),
    ("_silu_mul_kernel", "other"),
])
def test_a_kernel_name_is_counted_under_its_kind(name, kind):
    assert step_profile.kind_of(name) == kind


def test_long_template_names_are_cut_to_the_kernel():
    assert step_profile.short("void flashinfer::Kernel<true, 128, (PosEncodingMode)0>(Params)") \
        == "void flashinfer::Kernel<...>"


def test_the_table_shows_kinds_kernels_and_host_functions():
    prof = {"batch": 1, "steps": 2, "wall_us_per_step": 5800.0, "kernel_us_per_step": 4900.0,
            "idle_us_per_step": 900.0, "kernels_per_step": 400.0,
            "by_kind": {"gemm": {"us": 4000.0, "launches": 145.0}},
            "top": [{"name": "nvjet_x", "kind": "gemm", "us": 50.0, "launches": 36.0}],
            "host_top": [{"function": "engine.py:210 _step", "own_us": 120.0, "cum_us": 3000.0,
                          "calls": 1.0}]}
    text = step_profile.table(prof, "qwen3 8b default")
    assert "5800 us per step (kernels 4900 us, device idle 900 us)" in text
    assert "| gemm | 4000 | 145 |" in text and "| `nvjet_x` | gemm | 50.0 | 36 |" in text
    assert "| `engine.py:210 _step` | 120 | 3000 | 1.0 |" in text


def test_host_profile_ranks_the_functions_of_real_engine_steps():
    from hinge.config import EngineConfig
    from hinge.engine.engine import Engine
    from hinge.sampling_params import SamplingParams

    engine = Engine(EngineConfig(device="cpu", kv_cache_bytes=32 << 20), progress=False)
    engine.add_request([5, 6, 7, 8, 9], SamplingParams(max_new_tokens=20, temperature=0, ignore_eos=True))
    engine.step()
    rows = step_profile.host_profile(engine.step, 3, top=4)
    assert len(rows) == 4 and rows[0]["own_us"] >= rows[-1]["own_us"] > 0
    assert all(r["cum_us"] >= r["own_us"] for r in rows)


def test_a_prefill_profile_runs_whole_one_token_requests_and_leaves_none_behind():
    from hinge.config import EngineConfig
    from hinge.engine.engine import Engine
    from hinge.sampling_params import SamplingParams

    engine = Engine(EngineConfig(device="cpu", kv_cache_bytes=32 << 20), progress=False)
    prof = step_profile.profile_prefill(engine, [5, 6, 7, 8, 9, 10], SamplingParams(
        max_new_tokens=1, temperature=0), reps=2)
    assert prof["prompt_tokens"] == 6 and prof["steps"] == 2 and prof["wall_us_per_step"] > 0
    assert prof["host_top"] and prof["kernels_per_step"] == 0  # no CUDA kernels on the CPU
    assert not engine.has_unfinished()
    assert "cpu prefill: batch 1," in step_profile.table(prof, "cpu prefill")
