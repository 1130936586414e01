"""README's quick start is two commands, and .ci/run runs exactly those, handling pytest's exit 5."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "README's Quick start section has no ```bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_one_install_and_run_and_one_install_and_test_command() -> None:
    run, test = quick_start_commands()
    assert run.startswith("pip install -c constraints.txt -e . && hinge generate ")
    assert test == 'pip install -c constraints.txt -e ".[test]" && python -m pytest -q'


def test_ci_runs_exactly_the_readme_commands() -> None:
    lines = [line.strip() for line in CI.read_text().splitlines()]
    for command in quick_start_commands():
        assert any(line == command or line.startswith(command + " ||") for line in lines), command


def test_ci_script_is_strict_bash_and_executable() -> None:
    text = CI.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert CI.stat().st_mode & stat.S_IXUSR


def test_constraints_pin_the_cpu_torch() -> None:
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins


@pytest.mark.parametrize("main_rc, pytest_rc, expected_rc, message", [
    (0, 0, 0, None),
    (0, 5, 0, "collected no tests"),
    (0, 1, 1, None),
    (0, 2, 2, None),
    (3, 0, 3, None),
])
def test_ci_exit_status(tmp_path: Path, main_rc: int, pytest_rc: int, expected_rc: int,
                        message: str | None) -> None:
    """Stub pip/hinge/python on PATH; only pytest's "no tests" exit (5) is forgiven."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(CI, tmp_path / ".ci" / "run")
    shutil.copy(ROOT / "constraints.txt", tmp_path / "constraints.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name, rc in (("pip", 0), ("hinge", main_rc), ("python", pytest_rc)):
        stub = bin_dir / name
        # `python -c ...` (the script's own helper lines) runs the real interpreter
        real = f'[ "$1" = "-c" ] && exec "{sys.executable}" "$@"\n' if name == "python" else ""
        stub.write_text(f'#!/bin/sh\n{real}echo "{name} $*" >> "{log}"\nexit {rc}\n')
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True,
                         env=env, cwd="/", timeout=60)
    assert run.returncode == expected_rc, run.stdout + run.stderr
    if message:
        assert message in run.stdout
    calls = log.read_text().splitlines()
    assert calls[:2] == ["pip install -c constraints.txt -e .", "hinge generate def fibonacci(n):"]
    if main_rc == 0:
        assert calls[2:] == ["pip install -c constraints.txt -e .[test]", "python -m pytest -q"]


def _status_rows() -> list[tuple[str, str, str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Status", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+) \| `([\w-]+)` \| (\w+)", section, re.MULTILINE)
    assert rows, "README's Status section has no table rows"
    return rows


def test_readme_status_table_matches_the_installed_components() -> None:
    """An *available* row is listed by `hinge plugins --json`, and everything listed has one."""
    run = subprocess.run([sys.executable, "-m", "hinge.cli", "plugins", "--json"],
                         capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if not k.startswith("HINGE_")})
    assert run.returncode == 0, run.stderr
    import json

    first_party = {"hinge-llm"}
    listed = {(c["kind"], c["name"]) for p in json.loads(run.stdout)
              if p["status"] == "ok" and p["distribution"] in first_party for c in p["components"]}
    rows = _status_rows()
    assert {status for _, _, status in rows} <= {"available", "coming"}
    available = {(slot, name) for slot, name, status in rows if status == "available"}
    coming = {(slot, name) for slot, name, status in rows if status == "coming"}
    assert available == listed, f"README says available: {available}; installed: {listed}"
    assert not coming & listed, f"installed but README says coming: {coming & listed}"


def test_readme_layout_lists_only_folders_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    folders = re.findall(r"^(\S+/)\s", block, re.MULTILINE)
    assert folders
    for folder in folders:
        assert (ROOT / folder).is_dir(), f"README's layout lists {folder}, which does not exist"


def test_docs_link_only_to_files_inside_the_repository() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#]+)", text):
            if re.match(r"https?://", target):
                continue
            path = (doc.parent / target).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name} links to {target}"
        assert "../shared" not in text, f"{doc.name} points outside the repository (../shared)"
