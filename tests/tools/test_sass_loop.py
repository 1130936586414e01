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


def test_the_one_row_nvfp4_gemv_in_the_groups_layout_keeps_shared_memory_out_of_its_loop():
    """docs/nvfp4.md's claim, checked: the groups kernel's sm_90 loop has no barrier and no
    shared-memory traffic and fewer instructions a code than the words kernel's, which moves its
    decoded codes through shared memory."""
    from hinge_nvfp4.triton_gemv import GemvConfig

    words = sass_loop.nvfp4_gemv(1, config=GemvConfig(block_n=8, block_k=512, num_warps=2))
    groups = sass_loop.nvfp4_gemv(1, config=GemvConfig(block_n=8, block_k=512, num_warps=2,
                                                       layout="groups"))
    assert "groups" in groups.name and groups.spill_bytes == 0
    assert not any(groups.ops.get(op, 0) for op in ("BAR", "STS", "LDS"))
    assert words.ops.get("BAR", 0) > 0  # what the groups layout removes
    assert groups.per_element < words.per_element
