"""tools/gpu/nvfp4_trace.py: its trace builds replace the shipped cubins only for the launchers
made inside ``traced_cubins``, so that its "shipped" column times the shipped build."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import nvfp4_trace  # noqa: E402

from hinge_nvfp4 import mma_gemv  # noqa: E402


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
    try:
        with nvfp4_trace.traced_cubins():
            raise RuntimeError("a failed trace")
    except RuntimeError:
        pass
    assert mma_gemv.cached_cubin is shipped
