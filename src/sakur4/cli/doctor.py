"""``sakur4 doctor``: settings, store health, capabilities and backend, each ok, warn or FAIL."""

from __future__ import annotations

import sys

import click

from sakur4.cli.common import emit_json
from sakur4.doctor import diagnose

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Report settings, store health, capabilities and backend; exit 1 only on problems."""
    root = ctx.find_root().obj or {}
    report = diagnose(store=root.get("store"), project=root.get("project"))
    if as_json:
        emit_json(report.as_dict())
    else:
        click.echo(f"sakur4 {report.version}")
        for c in report.checks:
            click.echo(f"  [{_MARK[c.level]}] {c.name:<13} {c.detail}")
        for p in report.projects:
            counts = ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("id", "name", "root"))
            click.echo(f"  project {p['id']} {p['name']} ({p['root']}): {counts}")
    sys.exit(0 if report.ok else 1)
