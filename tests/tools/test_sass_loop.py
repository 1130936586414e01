"""tools/kernels/sass_loop.py: a Triton kernel compiled for sm_90 on this machine, its main loop
counted (registers, spills, instructions per element); launch-like alignment shows vector loads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas)")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "kernels"))
import sass_loop  # noqa: E402


def test_the_bf16_gemv_loop_is_counted_with_its_vector_loads():
    rep = sass_loop.bf16_gemv(1)
    assert rep.spill_bytes == 0 and rep.registers > 0
    # 16 rows x 512 bf16 per iteration over 128 threads: 64 elements a thread, 16 B (8-element)
    # loads when the pointers are known aligned (a launch's specialization); 2-byte loads without
    assert rep.ops["FFMA"] >= 64 and rep.ops["LDG"] + rep.ops.get("LDGSTS", 0) <= 16
    assert 1 < rep.per_element < 10


def test_the_nvfp4_gemv_loop_has_instructions_for_every_code():
    rep = sass_loop.nvfp4_gemv(1)
    assert rep.loop_instructions > 100 and rep.per_element > 1
