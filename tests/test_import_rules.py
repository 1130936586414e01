"""The floor rule: nothing below the engine imports it, the plugin system imports no component,
and the floor stands on nothing of hinge's (import-linter's contracts in pyproject.toml)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
HINGE = ROOT / "core" / "hinge"
BELOW_THE_ENGINE = ["forward.py", "batching.py", "devices.py", "contracts.py", "models", "layers",
                    "builtin", "testing"]


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    run = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, type-checking-only imports included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("part", BELOW_THE_ENGINE)
def test_nothing_below_the_engine_imports_it_even_for_type_checking(part):
    target = HINGE / part
    files = [target] if target.is_file() else sorted(target.rglob("*.py"))
    offenders = {str(f.relative_to(ROOT)): sorted(m for m in _imported_modules(f)
                                                  if m == "hinge.engine" or m.startswith("hinge.engine."))
                 for f in files}
    assert not {f: m for f, m in offenders.items() if m}


def test_first_party_plugins_import_only_public_hinge_modules():
    for path in sorted((ROOT / "plugins").rglob("*.py")) if (ROOT / "plugins").is_dir() else []:
        bad = sorted(m for m in _imported_modules(path)
                     if m.startswith("hinge.") and m.split(".")[1] in {"engine", "server", "cli"})
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}; use hinge.contracts / hinge.plugins"
