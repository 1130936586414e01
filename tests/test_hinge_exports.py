"""``from hinge import LLM, SamplingParams, hookimpl`` without importing torch up front."""

from __future__ import annotations

import subprocess
import sys


def test_importing_hinge_is_light_and_exports_load_lazily():
    code = ("import sys, hinge; assert 'torch' not in sys.modules, 'hinge imported torch'; "
            "from hinge import LLM, SamplingParams, hookimpl; "
            "assert LLM.__module__ == 'hinge.llm' and SamplingParams.__module__ == "
            "'hinge.sampling_params' and callable(hookimpl)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attribute_names_the_module():
    import pytest

    import hinge

    with pytest.raises(AttributeError, match="module 'hinge' has no attribute 'nope'"):
        hinge.nope  # noqa: B018
