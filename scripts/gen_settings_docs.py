"""Write docs/settings.md from ``Settings`` itself, so the reference cannot drift from the code.

    .venv/bin/python scripts/gen_settings_docs.py           # rewrite docs/settings.md
    .venv/bin/python scripts/gen_settings_docs.py --check   # exit 1 if it is stale

``tests/test_settings_reference.py`` fails when the file differs from what this renders.
Each row is one field: its ``SAKUR4_`` variable, its type, its default, its description.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sakur4.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "settings.md"
REGENERATE = ".venv/bin/python scripts/gen_settings_docs.py"

# A default computed at load time is described, not printed: the printed path would be
# this machine's.
COMPUTED = {
    "store": "`sakur4.db` in the platform's user data directory",
    "cache_dir": "the platform's user cache directory for `sakur4`",
}


def _type(annotation: Any) -> str:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        # X | None: unset means "not given"; X | Y: either (the store: a URL or a path)
        return " or ".join(_type(a) for a in args if a is not type(None))
    if typing.get_origin(annotation) is typing.Annotated:
        return _type(args[0])
    return getattr(annotation, "__name__", str(annotation))


def _default(name: str, field: FieldInfo) -> str:
    if name in COMPUTED:
        return COMPUTED[name]
    value: Any = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"`{value}` ({value:,})"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole reference: one row per field of ``Settings``, in declaration order."""
    rows = [
        "# Settings reference",
        "",
        f"Generated from `sakur4.settings.Settings` by `{REGENERATE}`; do not edit by hand",
        "(`tests/test_settings_reference.py` fails when this file is out of date).",
        "",
        "Every setting is an environment variable; a command-line flag of the same",
        "meaning wins over it, and it wins over the default. An empty variable counts as",
        "unset. A value that does not parse is refused at start with one line naming the",
        "variable.",
        "",
        "| variable | type | default | what it sets |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        cells = (_type(field.annotation), _default(name, field), field.description or "")
        rows.append(f"| `SAKUR4_{name.upper()}` | " + " | ".join(map(_cell, cells)) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"docs/settings.md is out of date: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
