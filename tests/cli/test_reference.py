"""docs/cli.md is what the CLI's own help says today (SPEC: the reference is generated).

Shown failing: a command's docstring edited without regenerating (docs/verification/guards.md).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    return load_script("gen_cli_docs")


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
