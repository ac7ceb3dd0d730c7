"""``sakur4 serve``: the MCP server, over stdio (default) or Streamable HTTP (``--http``)."""

from __future__ import annotations

import functools
import logging
import sys

import anyio
import click

from sakur4.bounds import PORT
from sakur4.cli.common import bounded, opened, settings


def _log_to_stderr() -> None:
    # stdout is the MCP wire on stdio: every diagnostic goes to stderr, one line each.
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="sakur4 serve: %(levelname)s %(message)s"
    )


@click.command("serve")
@click.option("--http", "use_http", is_flag=True, help="Serve Streamable HTTP instead of stdio.")
@click.option("--host", help="HTTP bind address [SAKUR4_HTTP_HOST; default 127.0.0.1].")
@click.option(
    "--port", type=bounded(PORT), help="HTTP port, 0 for any free one [SAKUR4_HTTP_PORT; 8742]."
)
@click.pass_context
def serve(ctx: click.Context, use_http: bool, host: str | None, port: int | None) -> None:
    """Serve the memory and context tools over MCP (stdio unless --http)."""
    if not use_http and (host is not None or port is not None):
        raise click.UsageError("--host and --port apply only with --http")
    s = settings(ctx, http_host=host, http_port=port)
    from sakur4.mcp import build_server
    from sakur4.mcp.host import ToolHost

    _log_to_stderr()
    with opened(s) as store:
        # Over HTTP a caller may only name projects already registered: a remote
        # client must not make the server read whatever directory it names.
        server = build_server(ToolHost.create(s, store, register_new_projects=not use_http))
        try:
            if use_http:
                from sakur4.mcp.http import serve_http

                announce = functools.partial(_announce, "Streamable HTTP on")
                anyio.run(serve_http, server, s, announce)
            else:
                from sakur4.mcp.stdio import serve_stdio

                anyio.run(serve_stdio, server, server.writes)
        except KeyboardInterrupt:
            pass


def _announce(what: str, url: str) -> None:
    click.echo(f"sakur4 serve: MCP {what} {url}", err=True)
