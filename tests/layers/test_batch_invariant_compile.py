"""The batch-invariant Triton kernels compile for a Hopper GPU (sm_90, the H200) on a machine
without one: Triton's front end, its pipeliner and ptxas all run on the host. Checks what the
interpreter cannot: the kernels type-check as compiled code, the GEMM uses the tensor cores
(wgmma) and software-pipelines its loads, and the per-row kernels fit in their registers."""

from __future__ import annotations

import importlib
import re
import subprocess

import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

HOPPER = GPUTarget("cuda", 90, 32)


def compile_kernel(module: str, kernel: str, signature: dict, constants: dict, aligned=(),
                   **options):
    """Compile like a launch would: ``aligned`` arguments specialized as multiples of 16 (what
    the JIT sees for contiguous tensors of model shapes), ``constants`` as constexprs (a stride of
    1 is specialized to a constant at launch too)."""
    fn = getattr(importlib.import_module(module), kernel)
    names = list(signature)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)
    return triton.compile(src, target=HOPPER, options=options)


def spill_bytes(kernel, tmp_path) -> int:
    """Bytes ptxas spills to local memory for ``kernel``'s PTX (``ptxas -v``)."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(kernel.asm["ptx"])
    report = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", str(ptx), "-o",
                             str(tmp_path / "kernel.cubin")], capture_output=True, text=True,
                            check=True).stderr
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", report))


def matmul_signature(ptr: str) -> dict:
    sig = {name: ptr for name in ("a_ptr", "b_ptr", "bias_ptr", "c_ptr")}
    sig.update({name: "i32" for name in ("M", "N", "K", "stride_am")})
    sig.update(stride_ak="constexpr", stride_bn="i32", stride_bk="constexpr", stride_cm="i32",
               stride_cn="constexpr")
    sig.update({name: "constexpr" for name in ("HAS_BIAS", "IEEE", "BLOCK_M", "BLOCK_N",
                                               "BLOCK_K", "GROUP_M")})
    return sig


@pytest.mark.parametrize("dtype,n", [("bf16", 4096), ("bf16", 151936), ("fp16", 6144), ("fp32", 4096)])
def test_the_gemm_compiles_to_pipelined_tensor_core_code_for_hopper(dtype, n):
    import torch

    from hinge.layers.batch_invariant_triton import matmul_config

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    cfg = matmul_config(n, 4096, torch_dtype, 132)
    kernel = compile_kernel(
        "hinge.layers.batch_invariant_triton.matmul", "_matmul_kernel", matmul_signature(f"*{dtype}"),
        dict(stride_ak=1, stride_bk=1, stride_cn=1, HAS_BIAS=True, IEEE=dtype == "fp32",
             BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m),
        aligned=("a_ptr", "b_ptr", "bias_ptr", "c_ptr", "N", "K", "stride_am", "stride_bn",
                 "stride_cm"),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    ptx = kernel.asm["ptx"]
    if dtype != "fp32":  # float32 runs IEEE fp32 on the CUDA cores (TF32 would round inputs)
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32", ptx), "no wgmma"
    assert "cp.async" in ptx, "loads are not software-pipelined"
    assert kernel.metadata.shared <= 227 * 1024


def test_rmsnorm_and_softmax_compile_for_model_widths_without_spilling(tmp_path):
    rms = compile_kernel(
        "hinge.layers.batch_invariant_triton.rmsnorm", "_rmsnorm_kernel",
        dict(x_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", D="i32", stride_x="i32",
             stride_out="i32", eps="fp32", BLOCK_D="constexpr"),
        dict(BLOCK_D=8192), aligned=("x_ptr", "w_ptr", "out_ptr", "D", "stride_x", "stride_out"),
        num_warps=8)
    assert spill_bytes(rms, tmp_path) == 0
    for log in (True, False):
        sm = compile_kernel(
            "hinge.layers.batch_invariant_triton.softmax", "_softmax_kernel",
            dict(x_ptr="*fp32", out_ptr="*fp32", V="i32", stride_x="i32", stride_out="i32",
                 LOG="constexpr", BLOCK="constexpr"),
            dict(LOG=log, BLOCK=4096), aligned=("x_ptr", "out_ptr"), num_warps=8)
        assert spill_bytes(sm, tmp_path) == 0


@pytest.mark.parametrize("track", [False, True])
def test_the_delta_rule_kernel_compiles_for_qwen3_5_heads_without_spilling(track, tmp_path):
    sig = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", g_ptr="*fp32", beta_ptr="*bf16",
               s0_ptr="*fp32", cu_ptr="*i64", out_ptr="*bf16", final_ptr="*fp32",
               states_ptr="*fp32")
    sig.update({name: "i32" for name in ("stride_qt", "stride_qh", "stride_kt", "stride_kh",
                                         "stride_vt", "stride_vh", "stride_gt", "stride_bt")})
    sig.update(scale="fp32", eps="fp32")
    sig.update({name: "constexpr" for name in ("HV", "REP", "DK", "DV", "BK", "BV", "TRACK")})
    kernel = compile_kernel(
        "hinge.layers.recurrent_kernels.delta_rule_triton", "_delta_rule_kernel", sig,
        dict(HV=32, REP=2, DK=128, DV=128, BK=128, BV=8, TRACK=track), num_warps=1)
    assert spill_bytes(kernel, tmp_path) == 0
