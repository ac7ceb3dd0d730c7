"""The ``sakur4`` command line: one module per command group, errors mapped once here.

Every command builds its configuration from :class:`sakur4.settings.Settings`
(flags win over ``SAKUR4_*``). A :class:`sakur4.errors.Sakur4Error` becomes one
line on stderr and exit code 1; nothing else reaches the user as a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from sakur4 import __version__
from sakur4.cli import demo, doctor, gateway, ledger, memory, probe, project, receipts, serve
from sakur4.cli.common import CliError
from sakur4.errors import Sakur4Error


class _Sakur4Group(click.Group):
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
@click.option("--store", help="SQLite store file [SAKUR4_STORE].")
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


for _module in (project, doctor, receipts, serve, gateway, memory, ledger, probe, demo):
    _module.register(cli)


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
