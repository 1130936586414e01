"""The in-place decode kernel compiles for a Hopper GPU (sm_90, the H200) on a machine without one,
without spilling, and its floating-point instructions are the token-recurrence kernel's, in the
same order: a decode row is the same bits whichever of the two runs it (the GPU test compares the
bits themselves)."""

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
QWEN3_5 = dict(HV=32, REP=2, DK=128, DV=128, BK=128, BV=8)
STRIDES = ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh", "stride_gt",
           "stride_bt")


def compile_kernel(module: str, kernel: str, pointers: dict, constants: dict):
    fn = getattr(importlib.import_module(module), kernel)
    signature = {**pointers, **dict.fromkeys(STRIDES, "i32"), "scale": "fp32", "eps": "fp32",
                 **dict.fromkeys(constants, "constexpr")}
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants),
                          target=HOPPER, options={"num_warps": 1})


def decode_kernel():
    pointers = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", g_ptr="*fp32", beta_ptr="*bf16",
                    pool_ptr="*fp32", cu_ptr="*i64", read_ptr="*i64", write_ptr="*i64",
                    prefix_ptr="*i64", out_ptr="*bf16")
    return compile_kernel("hinge.layers.recurrent_kernels.decode_in_pool", "_decode_in_pool_kernel",
                          pointers, QWEN3_5)


def recurrence_kernel():
    pointers = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", g_ptr="*fp32", beta_ptr="*bf16",
                    s0_ptr="*fp32", cu_ptr="*i64", out_ptr="*bf16", final_ptr="*fp32",
                    states_ptr="*fp32")
    return compile_kernel("hinge.layers.recurrent_kernels.delta_rule_triton", "_delta_rule_kernel",
                          pointers, {**QWEN3_5, "TRACK": False})


def float_ops(kernel) -> list[str]:
    """The kernel's float32 arithmetic and shuffle instructions, in PTX order."""
    body = kernel.asm["ptx"].split(".section")[0]
    return [line.split()[0] for line in body.splitlines()
            if re.match(r"\s+(fma|mul|add|sub|rsqrt|ex2|max|min|div|shfl|cvt)\.\S*(f32|b32)", line)]


def test_the_decode_kernel_compiles_for_qwen3_5_heads_without_spilling(tmp_path):
    from triton.backends.nvidia.compiler import get_ptxas

    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(decode_kernel().asm["ptx"])
    report = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", str(ptx), "-o",
                             str(tmp_path / "kernel.cubin")], capture_output=True, text=True,
                            check=True).stderr
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", report)) == 0


def test_the_decode_kernels_float_instructions_are_the_token_recurrence_kernels():
    ours, theirs = float_ops(decode_kernel()), float_ops(recurrence_kernel())
    assert len(ours) > 50 and ours == theirs
