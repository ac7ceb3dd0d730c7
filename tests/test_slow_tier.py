"""Every entry of the slow tier (``conftest.SLOW``) names tests that exist.

The entries match node ids by prefix, so a renamed or moved test silently left the
slow tier and joined the fast one (issue 38). Shown failing: docs/verification/guards.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import SLOW

TESTS = Path(__file__).parent


def ids_in(path: Path, root: Path = TESTS) -> list[str]:
    """The node ids (relative to ``root``, without parameters) of ``path``'s tests."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(root).as_posix()
    ids: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            ids.append(f"{rel}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            ids += [
                f"{rel}::{node.name}::{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                and f.name.startswith("test")
            ]
    return ids


def every_test_id() -> list[str]:
    return [i for p in sorted(TESTS.rglob("test_*.py")) for i in ids_in(p)]


@pytest.mark.parametrize("entry", SLOW)
def test_every_slow_entry_names_a_test(entry: str) -> None:
    matched = [i for i in every_test_id() if i.startswith(entry)]
    assert matched, (
        f"tests/conftest.py's SLOW entry {entry!r} matches no test: renamed or moved? "
        "Fix the entry, or the test joins the fast tier"
    )


def test_the_reader_finds_tests_in_functions_and_classes(tmp_path: Path) -> None:
    sample = tmp_path / "sub" / "test_sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "def test_a():\n    pass\n\nasync def test_b():\n    pass\n\n"
        "def helper():\n    pass\n\nclass TestC:\n    def test_d(self):\n        pass\n",
        encoding="utf-8",
    )
    assert ids_in(sample, tmp_path) == [
        "sub/test_sample.py::test_a",
        "sub/test_sample.py::test_b",
        "sub/test_sample.py::TestC::test_d",
    ]
