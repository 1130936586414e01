"""``quantizer_options`` of the nvfp4 quantizer (pydantic, unknown keys refused)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class NVFP4Options(BaseModel):
    model_config = ConfigDict(extra="forbid")

    activations: Literal["w4a16", "w4a4"] = Field(
        "w4a16", description="w4a16 (default): weights dequantized, activations stay in the compute "
        "dtype, as Hopper kernels compute; w4a4: activations quantized to NVFP4 with the "
        "checkpoint's static input_scale and dynamic per-16 fp8 scales, as Blackwell's FP4 GEMM "
        "computes (emulated on CPU and Hopper; needs input_scale in the checkpoint)")
    kernel: Literal["auto", "torch", "triton", "flashinfer", "mma"] = Field(
        "auto", description="auto: torch reference on CPU; on CUDA mma on Hopper (compute "
        "capability 9.0) for a bf16 model in default mode with w4a16 (triton if nvcc cannot build "
        "it), flashinfer's FP4 GEMM (mm_fp4) on Blackwell (compute capability >= 10.0) with w4a4, "
        "else the Triton W4A16 GEMM; torch: dequantize + matmul anywhere; triton / flashinfer / "
        "mma: force that kernel. mma (CUDA, w4a16, bf16, default mode): decode GEMVs of at most "
        "16 bf16 rows on the tensor cores (hinge_nvfp4.mma_gemv: a CUDA kernel nvcc compiles at "
        "start-up, cached on disk) over a fragment-layout repack of each weight, which replaces "
        "the checkpoint's codes while prefill_dequant_rows > 0; experts as triton")
    prefill_dequant_rows: int = Field(
        64, ge=0, description="default mode, CUDA, triton and mma kernels: from this many rows of x "
        "(prefill sizes), a linear dequantizes its weight with its global scale into a shared bf16 "
        "buffer (the largest weight's size, taken at load) and calls cuBLAS instead of the fused "
        "dequant GEMM (mma: fewer rows, more than 16, run its GEMV 16 rows a launch); 0: never "
        "(mma then keeps the checkpoint's codes too, for the Triton GEMM: half a byte a weight)")
