"""tools/gpu/nvfp4_launch_chain.py: every variant is a tiling the kernel runs, checked before a
device call is spent on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

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
        if ("deep" in label or "whole" in label) and shape in WIDE and plan[shape]["kwarps"] == 8:
            # rings of 8 or 9 are not built for 8 warps a block: run those variants with
            # --shapes qkv gate_up o (lanes co20 and whole31 do)
            with pytest.raises(ValueError, match="rings of <= 5"):
                mma_tiling.tiling(n, k, 132, plan)
            continue
        if label.startswith("regs") and shape in WIDE and "kwarps" not in nvfp4_launch_chain.VARIANTS[label]:
            # the register form is built at 1, 2 or 4 warps a tile (lane r22: --shapes qkv gate_up o)
            with pytest.raises(ValueError, match="forms plain, ahead, xring, bulk, regs"):
                mma_tiling.tiling(n, k, 132, plan)
            continue
        tiling = mma_tiling.tiling(n, k, 132, plan)
        for key, value in nvfp4_launch_chain.VARIANTS[label].items():
            if key == "few":  # the launch of the fewest rows: the entry's, with the keys named changed
                assert tiling.few.upto == value.get("upto", 1), shape
                assert all(getattr(tiling.few.plan, k) == v for k, v in value.items() if k != "upto"), shape
            elif key == nvfp4_launch_chain.PER_SHAPE:  # this shape's own change
                assert all(getattr(tiling, k) == v for k, v in value.get(shape, {}).items()), (shape, value)
            elif key == "r16" and value is None:  # no 16-row launch of its own
                assert tiling.rows16 is None, shape
            elif key not in ("r16", nvfp4_launch_chain.MEMORY_ALONE, nvfp4_launch_chain.BUILD_OPTIONS):
                assert getattr(tiling, key) == value, (shape, key)


@pytest.mark.parametrize("label", ["no few", "kw8 bulk", "shallow 3"])
def test_a_variant_launches_the_fewest_rows_as_the_rest_unless_it_names_their_launch(label):
    assert any("few" in entry for entry in H100.values())  # (the file names one: else nothing to drop)
    plan = nvfp4_launch_chain.variant_plan(H100, nvfp4_launch_chain.VARIANTS[label])
    for shape in plan:
        assert mma_tiling.tiling(*map(int, shape.split("x")), 132, plan).few is None, shape


def test_the_h100_file_has_an_eight_warps_a_tile_shape_for_the_deep_variants_to_skip():
    assert WIDE == {"4096x12288"}


def test_a_per_shape_change_reaches_its_shape_alone_and_stays_out_of_the_tilings_file():
    change = {"trigger": "read", nvfp4_launch_chain.PER_SHAPE: {"6144x4096": {"splits": 4}}}
    plan = nvfp4_launch_chain.variant_plan(H100, change)
    assert plan["6144x4096"]["splits"] == 4 and plan["6144x4096"]["trigger"] == "read"
    assert all(plan[shape]["splits"] == H100[shape]["splits"] and plan[shape]["trigger"] == "read"
               for shape in H100 if shape != "6144x4096")
    assert all(nvfp4_launch_chain.PER_SHAPE not in entry for entry in plan.values())


@pytest.mark.parametrize("label", [label for label, change in nvfp4_launch_chain.VARIANTS.items()
                                   if change and change.get(nvfp4_launch_chain.MEMORY_ALONE)])
def test_a_memory_alone_variant_keeps_its_diagnostic_key_out_of_the_tilings_file(label):
    plan = nvfp4_launch_chain.variant_plan(H100, nvfp4_launch_chain.VARIANTS[label])
    assert all(nvfp4_launch_chain.MEMORY_ALONE not in entry for entry in plan.values())


def test_memory_alone_launches_each_layer_by_the_diagnostic_form_of_its_own_tiling():
    from types import SimpleNamespace

    class Launcher(SimpleNamespace):
        def reserve_counters(self, tiles, device):
            self.counters = tiles

    kernel = SimpleNamespace(_gemv=lambda plan: asked.append(plan) or Launcher(form=plan.form))
    for splits in (1, 2):
        asked = []
        tiling = mma_tiling.tiling(6144, 4096, 132, nvfp4_launch_chain.variant_plan(H100, {"splits": splits}))
        layers = [SimpleNamespace(nvfp4_mma_tiling=tiling, nvfp4_mma_gemv="shipped", nvfp4_mma_row_scale=torch.ones(6144))
                  for _ in range(2)]
        nvfp4_launch_chain.memory_alone(kernel, layers)
        assert [layer.nvfp4_mma_gemv.form for layer in layers] == ["ring"] * 2
        assert asked == [tiling._replace(form="ring")] * 2 and tiling.form == "bulk" and tiling.splits == splits
        # a split launch's counters reserved for its tiles, as prepare_linear reserves them
        assert [getattr(layer.nvfp4_mma_gemv, "counters", None) for layer in layers] == [
            None if splits == 1 else 6144 // 16] * 2
    # the register form's memory side alone, as its variants name it
    asked = []
    tiling = mma_tiling.tiling(6144, 4096, 132, nvfp4_launch_chain.variant_plan(H100, nvfp4_launch_chain.VARIANTS["regs fold"]))
    layers = [SimpleNamespace(nvfp4_mma_tiling=tiling, nvfp4_mma_gemv="shipped", nvfp4_mma_row_scale=torch.ones(6144))]
    nvfp4_launch_chain.memory_alone(kernel, layers, nvfp4_launch_chain.VARIANTS["regs fold"][nvfp4_launch_chain.MEMORY_ALONE])
    assert tiling.form == "regs" and asked == [tiling._replace(form="regs_fold")]


def test_a_plan_named_by_the_variable_is_the_shipped_variant_and_every_variants_base(tmp_path, monkeypatch):
    """``$HINGE_NVFP4_MMA_PLAN`` was once popped unread, so an "H100 file" run on an H200 timed
    the H200's file: each kernel object must be built while the variable names its own file."""
    import json
    import os

    from hinge_nvfp4 import kernels as nvfp4_kernels

    seen = []

    class Kernel:  # what MmaKernel reads at construction: the variable's file
        def __init__(self, dequant_rows):
            seen.append(json.loads(open(os.environ["HINGE_NVFP4_MMA_PLAN"]).read()))

    monkeypatch.setattr(nvfp4_kernels, "MmaKernel", Kernel)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA H200")  # not the base's GPU
    plan = {shape: {**entry, "spread": False} for shape, entry in H100.items()}  # no GPU ships this file
    base = tmp_path / "base.json"
    base.write_text(json.dumps(plan))
    monkeypatch.setenv("HINGE_NVFP4_MMA_PLAN", str(base))
    built = nvfp4_launch_chain.kernels(str(tmp_path), {"shipped": None, "ring 2": {"stages": 2}})
    assert list(built) == ["shipped", "ring 2"]
    assert seen == [plan, nvfp4_launch_chain.variant_plan(plan, {"stages": 2})]
    assert os.environ.get("HINGE_NVFP4_MMA_PLAN") is None  # the caller's kernels read nothing after


def test_a_diagnostic_variant_builds_its_launchers_cubins_with_its_options_and_only_inside(monkeypatch):
    """The diagnostic variants (``BUILD_OPTIONS``, e.g. ``r16 x once``, ``no wait``, ``x once``:
    never in a tilings file) load their launchers from ``build_cubin(**options)`` (once a process
    and option set), made inside ``diagnostic_cubins``; outside it, and in a variant without
    options, the shipped ``cached_cubin`` is back."""
    from hinge_nvfp4 import mma_gemv

    builds = []
    monkeypatch.setattr(mma_gemv, "build_cubin", lambda **options: builds.append(options) or b"d")
    monkeypatch.setattr(nvfp4_launch_chain, "DIAGNOSTIC_BUILDS", {})
    shipped = mma_gemv.cached_cubin
    options = nvfp4_launch_chain.VARIANTS["r16 x once"][nvfp4_launch_chain.BUILD_OPTIONS]
    assert nvfp4_launch_chain.BUILD_OPTIONS not in next(iter(nvfp4_launch_chain.variant_plan(
        H100, nvfp4_launch_chain.VARIANTS["r16 x once"]).values()))
    with nvfp4_launch_chain.diagnostic_cubins(options):
        assert mma_gemv.cached_cubin("sm_90", 4, pdl=True, warps=8, row_scale="wait") == b"d"
        mma_gemv.cached_cubin("sm_90", 4, pdl=True, warps=8, row_scale="wait")
    assert mma_gemv.cached_cubin is shipped
    assert builds == [{"arch": "sm_90", "stages": 4, "prefetch": 0, "pdl": True, "warps": 8,
                       "columns": mma_gemv.COLUMNS, "trigger": "read", "row_scale": "wait", "wg": False,
                       "r16_diag": 1}]
    with nvfp4_launch_chain.diagnostic_cubins(None):
        assert mma_gemv.cached_cubin is shipped
