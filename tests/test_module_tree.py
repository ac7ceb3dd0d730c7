"""docs/DESIGN.md's module tree is the tree as it is: one line per module of src/sakur4,
drawn from its docstring (issue 18). Shown failing: docs/verification/guards.md."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from script_loader import load_script


def generator() -> ModuleType:
    return load_script("module_tree")


def test_design_lists_every_module_as_it_is() -> None:
    gen = generator()
    text = gen.DESIGN.read_text(encoding="utf-8")
    assert gen.BEGIN in text, f"docs/DESIGN.md has no module tree: run {gen.REGENERATE}"
    assert gen.with_listing(text, gen.render()) == text, (
        f"docs/DESIGN.md's module tree differs from src/: run {gen.REGENERATE}"
    )


def test_every_module_is_listed_once(tmp_path: Path) -> None:
    gen = generator()
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "a.py").write_text('"""Module a: ``x``\nand y.\n\nDetail not shown."""\n')
    (package / "sub" / "__init__.py").write_text('"""A subpackage, see :class:`~pkg.a.Thing`."""\n')
    (package / "sub" / "b.py").write_text('"""Module b."""\n')
    rows = [r for r in gen.render(package).splitlines() if r.startswith("| `")]
    assert rows == [
        "| `pkg/` | The package. |",
        "| `a.py` | Module a: `x` and y. |",
        "| `sub/` | A subpackage, see `Thing`. |",
        "| `sub/b.py` | Module b. |",
    ]


def test_a_module_without_a_docstring_is_refused(tmp_path: Path) -> None:
    gen = generator()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""The package."""\n')
    (tmp_path / "pkg" / "silent.py").write_text("X = 1\n")
    with pytest.raises(SystemExit, match=r"no docstring in silent\.py"):
        gen.render(tmp_path / "pkg")
