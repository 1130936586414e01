"""Hookimpls of the ``nvfp4`` plugin (registered through the ``hinge.plugins`` entry point).

Imports nothing heavy: the quantizer and the ``hinge quantize`` command are ``"module:attr"``
strings, imported when used.
"""

from __future__ import annotations

from hinge import hookimpl
from hinge.plugins import QuantizerCapabilities, QuantizerSpec
from hinge.plugins.commands import CommandSpec
from hinge_nvfp4.options import NVFP4Options

NVFP4_SPEC = QuantizerSpec(
    name="nvfp4",
    factory="hinge_nvfp4.quantizer:NVFP4Quantizer",
    capabilities=QuantizerCapabilities(
        # ModelOpt: quant_algo NVFP4 / W4A16_NVFP4; compressed-tensors: format nvfp4-pack-quantized
        checkpoint_methods=frozenset({"nvfp4", "w4a16_nvfp4", "nvfp4-pack-quantized"}),
        weight_formats=frozenset({"nvfp4"}),
        batch_invariant=True,
        decode_graph=True,
        prefill_graph=True,
        draft_graph=True,
        graph_note="kernels read static shapes and never sync with the host",
    ),
    options_model=NVFP4Options,
    description="NVFP4 weights (ModelOpt, compressed-tensors): W4A16 by default, W4A4 emulation "
    "by option; CPU reference, tensor-core decode GEMVs on Hopper (bf16; nvcc), Triton fused "
    "dequant GEMM elsewhere on CUDA, flashinfer mm_fp4 on Blackwell",
)


@hookimpl
def register_quantizers(register):
    register(NVFP4_SPEC)


QUANTIZE_COMMAND = CommandSpec(
    name="quantize",
    help="quantize a Hugging Face checkpoint to NVFP4 (ModelOpt format)",
    add_arguments="hinge_nvfp4.command:add_arguments",
    run="hinge_nvfp4.command:run",
)


@hookimpl
def register_commands(register):
    register(QUANTIZE_COMMAND)
