"""docs/plugins.md's acme example is real: its two files, written out as a package, register and
pass the attention contract kit (so every name its snippets use is defined, and they work)."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest

from hinge.testing import AttentionBackendContract

DOC = Path(__file__).parents[2] / "docs" / "plugins.md"


def _write_example_package() -> Path:
    blocks = re.findall(r"```python\n# (acme_attn/\w+\.py)[^\n]*\n(.*?)```", DOC.read_text(), re.DOTALL)
    files = dict(blocks)
    assert set(files) == {"acme_attn/plugin.py", "acme_attn/backend.py"}, sorted(files)
    root = Path(tempfile.mkdtemp(prefix="hinge-docs-acme-"))
    (root / "acme_attn").mkdir()
    (root / "acme_attn" / "__init__.py").write_text("")
    for name, code in files.items():
        (root / name).write_text(code)
    return root


sys.path.insert(0, str(_write_example_package()))
from acme_attn.plugin import ACME_SPEC, register_attention_backends  # noqa: E402


def test_the_documented_hookimpl_registers_the_documented_spec():
    seen = []
    register_attention_backends(seen.append)
    assert seen == [ACME_SPEC] and ACME_SPEC.options_model(split_size=64).split_size == 64
    with pytest.raises(ValueError):
        ACME_SPEC.options_model(nope=1)


class TestDocumentedAcmeBackend(AttentionBackendContract):
    @pytest.fixture
    def spec(self):
        return ACME_SPEC
