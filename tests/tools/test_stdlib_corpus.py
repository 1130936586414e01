"""Corpus selection, split and packing of tools/train/stdlib_corpus.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "train"))
import stdlib_corpus  # noqa: E402


def _make_tree(root: Path, rel_paths: list[str]) -> None:
    for rel in rel_paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {rel}\n", encoding="utf-8")


def test_selection_skips_tests_idle_generated_files_and_non_python(tmp_path):
    kept = ["os.py", "json/decoder.py", "asyncio/tasks.py", "email/mime/text.py"]
    dropped = [
        "test/test_os.py",
        "unittest/test/test_case.py",
        "distutils/tests/test_core.py",
        "idlelib/editor.py",
        "turtledemo/clock.py",
        "encodings/cp1252.py",
        "pydoc_data/topics.py",
        "site-packages/pip/__init__.py",
        "_sysconfigdata__linux_x86_64-linux-gnu.py",
        "config-3.11-x86_64-linux-gnu/python-config.py",
        "LICENSE.txt",
        "json/notes.pyc",
    ]
    _make_tree(tmp_path, kept + dropped)
    assert stdlib_corpus.select_paths(tmp_path) == sorted(kept)


def test_files_come_in_relative_path_order_and_non_utf8_files_are_skipped(tmp_path):
    _make_tree(tmp_path, ["b.py", "a/z.py", "a.py"])
    (tmp_path / "latin.py").write_bytes(b"# caf\xe9\n")
    files = list(stdlib_corpus.iter_files(root=tmp_path))
    assert [f.rel_path for f in files] == ["a.py", "a/z.py", "b.py"]
    assert files[0].text == "# a.py\n"


def test_split_depends_only_on_the_path_and_holds_out_about_five_percent():
    paths = [f"pkg{i // 50}/mod{i}.py" for i in range(4000)]
    splits = [stdlib_corpus.split_of(p) for p in paths]
    assert splits == [stdlib_corpus.split_of(p) for p in reversed(paths)][::-1]
    fraction = splits.count("val") / len(splits)
    assert 0.04 < fraction < 0.06, fraction


def test_split_filter_partitions_the_real_stdlib_selection():
    train = {f.rel_path for f in stdlib_corpus.iter_files("train")}
    val = {f.rel_path for f in stdlib_corpus.iter_files("val")}
    assert train and val and not train & val
    assert train | val == set(stdlib_corpus.select_paths())


def test_no_selected_file_contains_a_special_token_string():
    """Special-token strings are always parsed as special tokens, so none may occur in the text."""
    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    offenders = [
        f.rel_path for f in stdlib_corpus.iter_files() if any(t in f.text for t in specials)
    ]
    assert offenders == []
