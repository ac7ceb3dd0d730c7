"""docs/settings.md is what ``Settings`` says today: every ``SAKUR4_*`` variable, its
default and its meaning, generated (issue 38: ``SAKUR4_CHECKPOINT_MIN_STEP`` was
documented only in a design note). Shown failing: docs/verification/guards.md."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from sakur4.settings import Settings
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]


def generator() -> ModuleType:
    return load_script("gen_settings_docs")


def test_docs_settings_md_is_current() -> None:
    gen = generator()
    doc = ROOT / "docs" / "settings.md"
    assert doc.exists(), f"docs/settings.md is missing: run {gen.REGENERATE}"
    assert doc.read_text(encoding="utf-8") == gen.render(), (
        f"docs/settings.md is out of date with sakur4.settings.Settings: run {gen.REGENERATE}"
    )


def test_every_field_has_a_row_with_its_description() -> None:
    text = generator().render()
    for name, field in Settings.model_fields.items():
        row = next(
            (line for line in text.splitlines() if line.startswith(f"| `SAKUR4_{name.upper()}`")),
            None,
        )
        assert row is not None, f"SAKUR4_{name.upper()} has no row"
        assert field.description, f"Settings.{name} has no description to document"
        assert field.description.replace("|", "\\|").replace("\n", " ") in row


def test_no_machine_path_is_printed() -> None:
    text = generator().render()
    assert str(Path.home()) not in text
