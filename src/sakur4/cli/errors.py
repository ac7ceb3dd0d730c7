"""How the CLI shows an error: one line on stderr and exit code 1.

Click only, so the root command can map :class:`sakur4.errors.Sakur4Error` without
importing any service."""

from __future__ import annotations

from typing import Any

import click


class CliError(click.ClickException):
    """A one-line error and exit code 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"sakur4: error: {self.format_message()}", err=True)
