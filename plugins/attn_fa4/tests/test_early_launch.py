"""The split decode's Triton kernels under programmatic dependent launch
(``hinge.devices.early_dependents``), compiled for sm_90 on the CPU: the prepare kernel waits for
the kernel before it (``griddepcontrol.wait``) before any load or store; the merge reads only its
row's part count (the step's metadata, written before the attention call started) before the
wait, and none of the attention call's outputs; both let the kernel behind them launch early (the
attention call, the o projection); without the flag neither instruction is there."""

from __future__ import annotations

import re

import pytest

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from hinge_fa4 import merge_triton, prepare_triton  # noqa: E402

KERNELS = {
    "prepare": (prepare_triton._prepare_kernel,
                {**{p: "*bf16" for p in ("q_ptr", "k_ptr", "v_ptr", "kc_ptr", "vc_ptr", "qx_ptr")},
                 "loc_ptr": "*i64",
                 **{p: "i32" for p in ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt",
                                       "stride_vh", "q_width", "kv_width", "num_slots")}},
                {"D": 128, "BLOCK": 1024}),
    "merge": (merge_triton._merge_kernel,
              {"out_ptr": "*fp32", "lse_ptr": "*fp32", "parts_ptr": "*i32", "dst_ptr": "*bf16",
               **{p: "i32" for p in ("num_slots", "heads", "so_v", "so_h", "sl_v", "sl_h", "sd_t", "sd_h")}},
              {"D": 128, "BLOCK_D": 128, "BLOCK_S": 16, "ACC": triton.language.float32}),
}


def ptx(name: str, early: bool) -> str:
    kernel, signature, constants = KERNELS[name]
    constants = {**constants, "EARLY": early}
    source = ASTSource(fn=kernel, signature={**signature, **dict.fromkeys(constants, "constexpr")},
                       constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_an_early_launched_split_kernel_reads_nothing_the_call_before_writes_until_it_waits(name):
    code = ptx(name, True)
    wait = code.index("griddepcontrol.wait")
    assert "st.global" not in code[:wait], name
    early_loads = re.findall(r"ld\.global[^\n]*", code[:wait])
    if name == "merge":  # one 32-bit load: parts_ptr[t]; the parts' lse and outputs come after
        assert len(early_loads) == 1 and ".b32 {" in early_loads[0], early_loads
        assert "ld.global" in code[wait:]
    else:
        assert early_loads == [], (name, early_loads)
    assert "griddepcontrol.launch_dependents" in code, "lets the kernel behind it launch early"
    assert "griddepcontrol" not in ptx(name, False)
