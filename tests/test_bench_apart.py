"""``tests/`` holds the tests of ``src/`` and never imports ``bench/`` (issue 27): what
only the benchmark runs, and its tests, live in ``bench/`` and ``bench/tests/``.
Shown failing: docs/verification/guards.md."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_modules() -> set[str]:
    """The names ``bench/`` offers to a script run from it: its modules and packages."""
    bench = ROOT / "bench"
    return {p.stem for p in bench.glob("*.py")} | {
        p.parent.name for p in bench.glob("*/__init__.py")
    }


def imported(path: Path) -> set[str]:
    """The top-level names of a file's absolute imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_of_src_imports_bench() -> None:
    bench = bench_modules()
    assert {"eviction", "runs", "simserver", "reliability"} <= bench
    found = []
    for folder, dirs, files in os.walk(ROOT / "tests"):  # symlinks not followed
        dirs[:] = [d for d in dirs if d != "node_modules"]
        for name in files:
            if name.endswith(".py"):
                path = Path(folder, name)
                found += [f"{path.relative_to(ROOT)}: {m}" for m in imported(path) & bench]
    assert found == [], "tests/ imports bench/ (move the test to bench/tests/): " + ", ".join(found)
