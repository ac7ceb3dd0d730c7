"""``sakur4 gateway``: the OpenAI-compatible proxy a coding agent points at."""

from __future__ import annotations

import click
import uvicorn

from sakur4.bounds import PORT
from sakur4.cli.common import bounded, settings
from sakur4.gateway.app import create_app, require_token_for
from sakur4.turns.voice import speak_on


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
    app = create_app(s)
    click.echo(
        f"sakur4 gateway on http://{s.gateway_host}:{s.gateway_port}/v1 -> {s.backend}\n"
        f"dashboard: http://{s.gateway_host}:{s.gateway_port}/sakur4/",
        err=True,
    )
    speak_on(quiet=quiet)
    uvicorn.run(app, host=s.gateway_host, port=s.gateway_port, log_level="warning")
