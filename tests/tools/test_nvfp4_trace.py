"""tools/gpu/nvfp4_trace.py: the trace build's records cut into calls and read to the nanosecond;
its trace builds replace the shipped cubins only for the launchers made inside ``traced_cubins``,
so that its "shipped" column times the shipped build."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import nvfp4_trace  # noqa: E402

from hinge_nvfp4 import mma_gemv  # noqa: E402

BASE = 1_796_556_167_331_133_216  #: a %globaltimer reading of the H100 (ns): past float64's exact integers


def step(name: str, addresses: list[int], nbytes: int = 3_000_000) -> tuple:
    """A chain step as ``nvfp4_trace.chain`` makes one: its layers' repacks at ``addresses``."""
    layers = [types.SimpleNamespace(nvfp4_mma_words=types.SimpleNamespace(data_ptr=lambda a=a: a))
              for a in addresses]
    return name, layers, None, False, nbytes


def record(address: int, sm: int, marks: list[int]) -> np.ndarray:
    """One warp's record: its launch's address, its multiprocessor, the seven marks (ns)."""
    r = np.zeros(nvfp4_trace.FIELDS, dtype=np.uint64)
    r[0], r[1] = address, sm << 48
    r[2:9] = marks
    return r


def test_records_are_cut_into_calls_in_launch_order_whatever_order_they_were_written_in():
    steps = [step("qkv", [0x1000, 0x2000]), step("o", [0x3000, 0x4000])]
    rows = [record(a, 0, [BASE + t] * 7) for t, a in enumerate((0x4000, 0x1000, 0x3000, 0x2000, 0x1000))]
    calls = nvfp4_trace.calls_of(np.stack(rows), steps)
    assert [label for label, _, _ in calls] == ["qkv[0]", "o[0]", "qkv[1]", "o[1]"]
    assert [len(rec) for _, _, rec in calls] == [2, 1, 1, 1]


def test_a_calls_marks_are_printed_to_the_nanosecond_from_the_end_of_the_call_before(capsys):
    # %globaltimer near 1.8e18 ns is 256 ns a step as a float64: the marks are subtracted as integers
    steps = [step("down", [0x1000, 0x2000])]
    first = [BASE, BASE + 10, BASE + 20, BASE + 30, BASE + 40, BASE + 5_000, BASE + 6_000]
    end = BASE + 6_000
    second = [end - 300, end - 290, end + 1_337, end + 2_011, end + 3_129, end + 9_871, end + 10_443]
    rows = [record(0x1000, 0, first), record(0x2000, 1, second), record(0x2000, 1, second)]
    nvfp4_trace.report(nvfp4_trace.calls_of(np.stack(rows), steps), 3.0e3)
    line = capsys.readouterr().out.splitlines()[2].split()
    assert line[0] == "down[1]" and line[1] == "2"
    # entry min/med/max, the prologue's copies issued, the wait, superstep 0 landed and computed,
    # the last superstep, done
    assert line[2:14] == ["-0.30", "-0.30", "-0.30", "-0.29", "1.34", "1.34", "2.01", "3.13", "9.87", "9.87",
                          "9.87", "10.44"]
    assert line[15] == "10.44" and line[16] == "1000.00" and line[17] == "2"  # period, bytes / rate, warps an SM


def test_the_timer_step_is_the_smallest_difference_between_two_readings():
    rows = [record(1, 0, [BASE, BASE + 32, BASE + 64, BASE + 96, BASE + 256, BASE + 512, BASE + 1024])]
    assert nvfp4_trace.resolution(np.stack(rows)) == 32


def test_trace_builds_are_made_inside_traced_cubins_only_and_once_each(monkeypatch):
    builds = []
    monkeypatch.setattr(mma_gemv, "build_cubin", lambda *args, **options: builds.append((args, options)) or b"t")
    monkeypatch.setattr(nvfp4_trace, "TRACE_BUILDS", {})
    shipped = mma_gemv.cached_cubin
    with nvfp4_trace.traced_cubins(row_scale="start"):
        assert mma_gemv.cached_cubin("sm_90", 4, pdl=True) == b"t"
        mma_gemv.cached_cubin("sm_90", 4, pdl=True)
    assert mma_gemv.cached_cubin is shipped
    assert len(builds) == 1 and builds[0][1]["trace"] and builds[0][1]["row_scale"] == "start"
    with nvfp4_trace.traced_cubins(wait_first=True):  # another build: not the row_scale one's
        mma_gemv.cached_cubin("sm_90", 4, pdl=True)
    assert len(builds) == 2 and builds[1][1]["wait_first"] and builds[1][1]["row_scale"] == "end"
    # a launcher's own time (its tiling's "row_scale", passed as kernels._mma_launcher passes it)
    # unless --row-scale names one
    with nvfp4_trace.traced_cubins():
        mma_gemv.cached_cubin("sm_90", 4, pdl=True, warps=8, columns="coalesced", trigger="start", row_scale="wait")
    assert builds[2][1]["row_scale"] == "wait" and builds[2][1]["trigger"] == "start"
    with nvfp4_trace.traced_cubins(row_scale="end"):
        mma_gemv.cached_cubin("sm_90", 4, pdl=True, warps=8, columns="coalesced", trigger="start", row_scale="wait")
    assert len(builds) == 4 and builds[3][1]["row_scale"] == "end"
    try:
        with nvfp4_trace.traced_cubins():
            raise RuntimeError("a failed trace")
    except RuntimeError:
        pass
    assert mma_gemv.cached_cubin is shipped
