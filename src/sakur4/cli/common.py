"""What every command shares: settings from flags, the open store, the project, output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from sakur4.bounds import INT_MAX, Range
from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, ensure_project, find_project
from sakur4.store.roles import not_granted


class BoundedInt(click.IntRange):
    """The CLI's one integer type: a number outside its range is a one-line range error
    (every integer option and argument uses it; a test checks)."""

    name = "integer"

    def __init__(self, bounds: Range) -> None:
        super().__init__(bounds.lo, bounds.hi)
        self.bounds = bounds

    def _describe_range(self) -> str:
        # Help shows a real cap; SQLite's own limit is only a backstop, not worth a line.
        if self.bounds.hi == INT_MAX:
            return f"x>={self.bounds.lo}"
        return super()._describe_range()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        lo, hi = self.bounds
        if not lo <= number <= hi:  # the whole range, whatever the help line shows
            self.fail(f"{number} is not in the range {lo}<=x<={hi}.", param, ctx)
        return number


def bounded(r: Range) -> BoundedInt:
    return BoundedInt(r)


def settings(ctx: click.Context, **overrides: Any) -> Settings:
    """Settings from the environment, with the global and command flags that were given."""
    root = ctx.find_root().obj or {}
    return Settings.load(store=root.get("store"), project=root.get("project"), **overrides)


@contextmanager
def opened(s: Settings) -> Iterator[Store]:
    store = open_store(s.store)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def reading(s: Settings) -> Iterator[Store | None]:
    """The store opened read-only, for a command that only reads: it works on a
    read-only mount and never creates, migrates or registers anything. None when the
    store does not exist yet (nothing is recorded)."""
    try:
        missing = isinstance(s.store, Path) and not s.store.exists()  # a URL: the server says
    except OSError:
        missing = False  # let the open say what is wrong with it
    if missing:
        yield None
        return
    store = open_store(s.store, readonly=True)
    try:
        yield store
    finally:
        store.close()


def current_project(store: Store, s: Settings) -> Project:
    return ensure_project(store, s.project_root())


def known_project(store: Store | None, s: Settings) -> Project | None:
    """The current project if the store knows it (a read-only command registers none).
    A role limited to its grants (PostgreSQL) is refused a project it was not given,
    rather than told that nothing is recorded there."""
    if store is None:
        return None
    found = find_project(store, s.project_root())
    if found is None and (refused := not_granted(store, s.project_root().resolve())):
        raise refused
    return found


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Plain aligned columns: readable in a terminal, stable for tests."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)
