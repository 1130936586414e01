"""tools/gpu/nvfp4_launch_chain.py: every variant is a tiling the kernel runs, checked before a
device call is spent on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import nvfp4_launch_chain  # noqa: E402

from hinge_nvfp4 import mma_tiling  # noqa: E402

H100 = mma_tiling.tuned_tilings(device_name="NVIDIA H100 80GB HBM3")
WIDE = {shape for shape, entry in H100.items() if entry["kwarps"] == 8}  #: down's 8 warps a tile


@pytest.mark.parametrize("label", [label for label, change in nvfp4_launch_chain.VARIANTS.items() if change])
def test_every_variant_of_the_h100_file_is_a_tiling_the_kernel_runs(label):
    plan = nvfp4_launch_chain.variant_plan(H100, nvfp4_launch_chain.VARIANTS[label])
    for shape in plan:
        n, k = map(int, shape.split("x"))
        if label.startswith("deep") and shape in WIDE:
            # rings of 8 are not built for 8 warps a block: run the deep variants with
            # --shapes qkv gate_up o (lane co20 does)
            with pytest.raises(ValueError, match="rings of <= 5"):
                mma_tiling.tiling(n, k, 132, plan)
            continue
        tiling = mma_tiling.tiling(n, k, 132, plan)
        for key, value in nvfp4_launch_chain.VARIANTS[label].items():
            if key != "r16":
                assert getattr(tiling, key) == value, (shape, key)


def test_the_h100_file_has_an_eight_warps_a_tile_shape_for_the_deep_variants_to_skip():
    assert WIDE == {"4096x12288"}
