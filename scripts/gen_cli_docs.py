"""Write docs/cli.md from the CLI's own help, so the reference cannot drift from the code.

    .venv/bin/python scripts/gen_cli_docs.py           # rewrite docs/cli.md
    .venv/bin/python scripts/gen_cli_docs.py --check   # exit 1 if docs/cli.md is stale

``tests/cli/test_reference.py`` fails when the file differs from what this renders.
The help is rendered at a fixed width, so the output does not depend on the terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sakur4.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
WIDTH = 88
REGENERATE = ".venv/bin/python scripts/gen_cli_docs.py"


def _walk(
    cmd: click.Command, path: tuple[str, ...], parent: click.Context | None
) -> list[tuple[tuple[str, ...], str]]:
    # make_context applies the command's context_settings (the root's -h/--help).
    ctx = cmd.make_context(
        path[-1],
        [],
        parent=parent,
        resilient_parsing=True,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
    )
    found = [(path, cmd.get_help(ctx))]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            found += _walk(sub, (*path, name), ctx)
    return found


def render() -> str:
    """The whole reference: every command, in order, with its ``--help`` output."""
    parts = [
        "# Command-line reference",
        "",
        f"Generated from `sakur4 --help` by `{REGENERATE}`; do not edit by hand "
        "(`tests/cli/test_reference.py` fails when this file is out of date).",
        "",
    ]
    for path, text in _walk(cli, ("sakur4",), None):
        parts += [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", "", "```text"]
        parts += [line.rstrip() for line in text.splitlines()]
        parts += ["```", ""]
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run {REGENERATE}")
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
