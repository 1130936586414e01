"""The training corpus of the default model: this Python's own standard library sources.

Selection (stated in docs/default-model.md): every ``*.py`` file under
``sysconfig.get_paths()["stdlib"]``, recursively, except files under a directory named in
``EXCLUDED_DIRS`` (tests, IDLE, demos, generated tables and docs, third-party packages) and
files whose name starts with one of ``EXCLUDED_PREFIXES`` (generated build data). Files are
read as UTF-8 (a file that is not valid UTF-8 is skipped and counted) and ordered by their
POSIX path relative to the stdlib root, so every machine with the same Python version sees the
same documents in the same order.

Split: a file belongs to the validation split when the first 8 bytes of
``sha256(relative POSIX path)``, read as a big-endian integer, modulo 1000 are below
``VAL_PER_MILLE``. The rule depends only on the path, never on directory listing order.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

EXCLUDED_DIRS = frozenset(
    {
        "site-packages",  # third-party packages, differ per machine
        "test",
        "tests",
        "idlelib",
        "turtledemo",
        "encodings",  # generated codec tables
        "pydoc_data",  # generated documentation strings
        "__pycache__",
        "__phello__",  # frozen-module test fixtures
    }
)
EXCLUDED_PREFIXES = ("_sysconfigdata", "config-")
VAL_PER_MILLE = 50  # 5 % of files

Split = Literal["train", "val"]


@dataclass(frozen=True)
class SourceFile:
    """One corpus document: its path relative to the stdlib root and its text."""

    rel_path: str
    text: str

    @property
    def split(self) -> Split:
        return split_of(self.rel_path)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_version() -> str:
    return ".".join(str(part) for part in sys.version_info[:3])


def split_of(rel_path: str) -> Split:
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return "val" if int.from_bytes(digest[:8], "big") % 1000 < VAL_PER_MILLE else "train"


def is_selected(rel_path: str) -> bool:
    parts = rel_path.split("/")
    if any(part in EXCLUDED_DIRS or part.startswith(EXCLUDED_PREFIXES) for part in parts[:-1]):
        return False
    return parts[-1].endswith(".py") and not parts[-1].startswith(EXCLUDED_PREFIXES)


def select_paths(root: Path | None = None) -> list[str]:
    """Relative POSIX paths of the selected files, sorted."""
    root = stdlib_root() if root is None else root
    rel_paths = (p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file())
    return sorted(rel for rel in rel_paths if is_selected(rel))


def iter_files(split: Split | None = None, root: Path | None = None) -> Iterator[SourceFile]:
    """The selected files in path order, optionally only one split; non-UTF-8 files are skipped."""
    root = stdlib_root() if root is None else root
    for rel in select_paths(root):
        if split is not None and split_of(rel) != split:
            continue
        try:
            text = (root / rel).read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        yield SourceFile(rel, text)
