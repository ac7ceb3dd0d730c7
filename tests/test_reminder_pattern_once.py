"""The ``<system-reminder>`` pattern is written once (issue 38: the natures and the churn
repair each had a copy, which could drift apart and make the two disagree on what a
reminder is). Its home is what the harnesses share (harnesses/base.py): Claude Code's
and OpenCode's classifiers and the churn repair read it there."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "sakur4"


def test_the_reminder_pattern_has_one_home() -> None:
    homes = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if re.search(r"compile\(\s*r?[\"']<system-reminder>", path.read_text())
    ]
    assert homes == ["harnesses/base.py"]
