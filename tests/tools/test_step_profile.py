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
