"""tools/gpu/merge_tilings.py: a tilings file merged shape by shape from others, checked as the
kernel reads it before a device call is spent on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import merge_tilings  # noqa: E402
import nvfp4_launch_chain  # noqa: E402

from hinge_nvfp4 import mma_tiling  # noqa: E402

H100 = mma_tiling.tuned_tilings(device_name="NVIDIA H100 80GB HBM3")


def test_a_merged_file_takes_each_picked_shape_from_its_file_and_the_rest_from_the_base(tmp_path):
    natural = nvfp4_launch_chain.variant_plan(H100, nvfp4_launch_chain.VARIANTS["wgn kw2"])
    (tmp_path / "base.json").write_text(json.dumps(H100))
    (tmp_path / "wgn_kw2.json").write_text(json.dumps(natural))
    merge_tilings.main([str(tmp_path / "out.json"), str(tmp_path / "base.json"),
                        f"gate_up={tmp_path / 'wgn_kw2.json'}", f"4096x12288={tmp_path / 'wgn_kw2.json'}"])
    merged = json.loads((tmp_path / "out.json").read_text())
    assert merged["24576x4096"] == natural["24576x4096"] and merged["4096x12288"] == natural["4096x12288"]
    assert merged["6144x4096"] == H100["6144x4096"] and merged["4096x4096"] == H100["4096x4096"]
    plan = mma_tiling.tiling(24576, 4096, 132, merged)
    assert (plan.form, plan.kwarps, plan.columns) == ("wg", 2, "natural")


def test_a_pick_the_kernel_would_refuse_is_refused_naming_its_shape_before_anything_is_written(tmp_path):
    wrong = {"6144x4096": {**H100["6144x4096"], "form": "wg", "kwarps": 4, "r16": None, "few": None}}
    wrong["6144x4096"].pop("few")
    with pytest.raises(ValueError, match=r"6144x4096 .*share K \(4 warps a tile\) in the natural column map alone"):
        merge_tilings.merge(H100, {"6144x4096": wrong})
    with pytest.raises(ValueError, match="the file picked for 4096x4096 has no entry for it"):
        merge_tilings.merge(H100, {"4096x4096": {}})
    with pytest.raises(ValueError, match="no shape 'qvk': name one of qkv, gate_up, down, o or an NxK key"):
        merge_tilings.shape_key("qvk")
    assert not (tmp_path / "out.json").exists()
