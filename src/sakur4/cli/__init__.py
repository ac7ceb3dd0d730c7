"""The ``sakur4`` command line: one module per command group, errors mapped once here.

Every command builds its configuration from :class:`sakur4.settings.Settings`
(flags win over ``SAKUR4_*``). A :class:`sakur4.errors.Sakur4Error` becomes one
line on stderr and exit code 1; nothing else reaches the user as a traceback.

A command's module is imported only when that command runs (or ``--help`` lists
it): start-up is paid on every harness spawn and every shell call, and a command
should pay for what it uses: ``sakur4 --version`` for click, ``sakur4 index`` for
the Ledger, never for the gateway's web stack or numpy (issue 18; figures in
bench/startup.py and docs/DESIGN.md).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from sakur4 import __version__
from sakur4.cli.errors import CliError
from sakur4.errors import Sakur4Error

# command name -> "module:attribute" under sakur4.cli
COMMANDS = {
    "anchor": "anchors:anchor_group",
    "atlas": "atlas:atlas_group",
    "demo": "demo:demo",
    "doctor": "doctor:doctor",
    "embed": "episodes:embed_cmd",
    "episodes": "episodes:episodes_cmd",
    "gateway": "gateway:gateway",
    "impact": "ledger:impact_cmd",
    "index": "ledger:index_cmd",
    "map": "ledger:map_cmd",
    "open-fold": "episodes:open_fold_cmd",
    "probe": "probe:probe_cmd",
    "project": "project:project_group",
    "recall": "episodes:recall_cmd",
    "receipts": "receipts:receipts",
    "remember": "episodes:remember_cmd",
    "serve": "serve:serve",
    "status": "project:status",
    "symbol": "ledger:symbol_cmd",
    "wrap": "wrap:wrap_cmd",
}


class _Sakur4Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, attribute = where.split(":")
        command = getattr(importlib.import_module(f"sakur4.cli.{module}"), attribute)
        assert isinstance(command, click.Command), where
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:
            # click suggests from the commands it holds; this group holds names only.
            raise click.exceptions.NoSuchCommand(
                e.command_name, possibilities=list(COMMANDS), ctx=ctx
            ) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Sakur4Error as e:
            raise CliError(str(e)) from e
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Sakur4Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sakur4")
@click.option("--store", help="The store: a SQLite file, or a postgresql:// URL [SAKUR4_STORE].")
@click.option(
    "--project",
    "project_root",
    type=click.Path(file_okay=False),
    help="Project root [SAKUR4_PROJECT; default: the working directory].",
)
@click.pass_context
def cli(ctx: click.Context, store: str | None, project_root: str | None) -> None:
    """Sakur4: context and memory for coding agents on local inference servers."""
    ctx.obj = {"store": store, "project": project_root}


def main() -> None:
    """Console entry point: every error is one line on stderr and a non-zero exit."""
    try:
        code = cli.main(prog_name="sakur4", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("sakur4: aborted", err=True)
        sys.exit(130)
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx else "sakur4"
        click.echo(f"sakur4: error: {e.format_message()} (see `{where} --help`)", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
