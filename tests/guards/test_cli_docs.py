"""docs/cli.md is what the CLI's own help says today (SPEC: the reference is generated).

Shown failing: a command's docstring edited without regenerating (docs/verification/guards.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts/gen_cli_docs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_current() -> None:
    gen = generator()
    doc = ROOT / "docs" / "cli.md"
    assert doc.exists(), f"docs/cli.md is missing: run {gen.REGENERATE}"
    assert doc.read_text(encoding="utf-8") == gen.render(), (
        f"docs/cli.md is out of date with the CLI's help: run {gen.REGENERATE}"
    )


def test_every_command_is_in_the_reference() -> None:
    text = generator().render()
    for path in ("sakur4 doctor", "sakur4 serve", "sakur4 gateway", "sakur4 project add"):
        assert f"`{path}`" in text
