"""``sakur4 gateway``: the OpenAI-compatible proxy a coding agent points at."""

from __future__ import annotations

import errno
import socket

import click
import uvicorn

from sakur4.bounds import PORT
from sakur4.cli.common import bounded, settings
from sakur4.errors import SettingsError
from sakur4.gateway.app import create_app, require_token_for
from sakur4.turns.voice import speak_on


def check_free(host: str, port: int) -> None:
    """Refuse, in one line, a port this gateway could not listen on, before anything is
    printed or started (issue 41: a taken port printed the gateway's addresses, then
    uvicorn's bind error). Bound as uvicorn binds (SO_REUSEADDR), then let go: a program
    that takes the port in the moment between still meets uvicorn's own one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise SettingsError(
                    f"port {port} on {host} is in use (another gateway or program): "
                    "stop it, or choose another with --port"
                ) from e
            raise SettingsError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e


@click.command("gateway")
@click.option(
    "--backend", help="Inference server URL, e.g. http://127.0.0.1:8080 [SAKUR4_BACKEND]."
)
@click.option("--host", help="Bind address [SAKUR4_GATEWAY_HOST; default 127.0.0.1].")
@click.option("--port", type=bounded(PORT), help="Port [SAKUR4_GATEWAY_PORT; default 8741].")
@click.option("-q", "--quiet", is_flag=True, help="No line per turn; failures are still printed.")
@click.pass_context
def gateway(
    ctx: click.Context, backend: str | None, host: str | None, port: int | None, quiet: bool
) -> None:
    """Serve an OpenAI-compatible and Anthropic Messages API that manages the context
    and writes receipts. Prints a line per turn and per failure on stderr."""
    s = settings(ctx, backend=backend, gateway_host=host, gateway_port=port)
    require_token_for(s)  # refuse before binding, with one clear line
    check_free(s.gateway_host, s.gateway_port)
    app = create_app(s)
    click.echo(
        f"sakur4 gateway on http://{s.gateway_host}:{s.gateway_port}/v1 -> {s.backend}\n"
        f"dashboard: http://{s.gateway_host}:{s.gateway_port}/sakur4/",
        err=True,
    )
    speak_on(quiet=quiet)
    uvicorn.run(app, host=s.gateway_host, port=s.gateway_port, log_level="warning")
