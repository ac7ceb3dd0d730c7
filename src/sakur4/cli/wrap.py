"""``sakur4 wrap HARNESS [-- ARGS]``: run Claude Code, OpenCode, aider or any
OpenAI-compatible command through the gateway, configured for this run only."""

from __future__ import annotations

import sys
from dataclasses import replace

import click

from sakur4.bounds import AGENTS, COUNT, PORT
from sakur4.cli.common import bounded, settings
from sakur4.errors import SettingsError
from sakur4.harnesses.recipes import HARNESSES, harness
from sakur4.harnesses.save import refusal
from sakur4.wrap.run import Plan, wrap


@click.command(
    "wrap",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("harness_name", metavar="HARNESS", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--openai",
    "openai_command",
    is_flag=True,
    help="Run any OpenAI-compatible command (after --) with OPENAI_BASE_URL and "
    "OPENAI_API_KEY set for the gateway.",
)
@click.option(
    "--backend",
    help="Inference server URL [SAKUR4_BACKEND; default: a local server on the usual ports].",
)
@click.option("--port", type=bounded(PORT), help="Gateway port [SAKUR4_GATEWAY_PORT; 8741].")
@click.option(
    "--max-output",
    type=bounded(COUNT),
    help="Tokens one answer may take [default: an eighth of the server's window, 256-4096].",
)
@click.option(
    "--window",
    "told_window",
    type=bounded(COUNT),
    help="The window the harness is told [default: 1,000,000 for Claude Code and "
    "OpenCode, so the gateway alone keeps the prompt inside the server's; for aider the "
    "server's less the output cap; see docs/harnesses.md].",
)
@click.option(
    "--save",
    is_flag=True,
    help="Also write this configuration into the harness's own config files "
    "(Claude Code: settings.json and .claude.json; OpenCode: opencode.json), keeping "
    "everything else in them. Without it no file of yours is changed.",
)
@click.option("--no-mcp", is_flag=True, help="Do not register `sakur4 serve` with the harness.")
@click.option(
    "--agents",
    default=1,
    show_default=True,
    type=bounded(AGENTS),
    help="How many agents share the server (the harness's subagents and every other "
    "terminal count): wrap says how many slots and which cache flags they need.",
)
@click.pass_context
def wrap_cmd(
    ctx: click.Context,
    harness_name: str | None,
    args: tuple[str, ...],
    openai_command: bool,
    backend: str | None,
    port: int | None,
    max_output: int | None,
    told_window: int | None,
    save: bool,
    no_mcp: bool,
    agents: int,
) -> None:
    """Run a coding agent through the gateway, configured for this run only.

    HARNESS is one of: claude (Claude Code), opencode, aider, codex (refused, with the
    reason). With --openai, everything after -- is the command to run. The gateway on
    the port is reused when it is a Sakur4 gateway; otherwise one is started, in front
    of --backend or a local server found on the usual ports (waiting while it loads).
    Every wrap on the port shares it, and the last one out stops it. The harness is
    told the model, an output cap and a window (large for Claude Code and OpenCode, as
    the gateway keeps the prompt inside the real one; for aider, the server's less the
    cap, with its repo map sized to fit), and `sakur4 serve` as its MCP server where it
    takes one. Its exit code is this command's.

    \b
    sakur4 wrap claude
    sakur4 wrap opencode -- run "list the modules"
    sakur4 wrap aider -- --message "add a test"
    sakur4 wrap --openai -- python my_agent.py
    sakur4 wrap claude --save          # also write the settings into Claude Code's files
    """
    # `wrap HARNESS --save -- ARGS`: a --save right after the name is wrap's own.
    if not openai_command and args[:1] == ("--save",):
        save, args = True, args[1:]
    plan = plan_of(harness_name, args, openai_command, max_output, mcp=not no_mcp)
    why = refusal(plan.harness) if save else None
    if why is not None:
        raise SettingsError(f"--save: {why}")
    plan = replace(plan, window=told_window, save=save, agents=agents)
    s = settings(ctx, backend=backend, gateway_port=port)
    code = wrap(s, plan, lambda line: click.echo(line, err=True))
    sys.exit(code)


def plan_of(
    harness_name: str | None,
    args: tuple[str, ...],
    openai_command: bool,
    max_output: int | None,
    *,
    mcp: bool,
) -> Plan:
    """The run the command line asks for: the harness and the arguments it gets."""
    if openai_command:
        command = (harness_name, *args) if harness_name else args
        if not command:
            raise click.UsageError("--openai needs the command to run: --openai -- CMD ...")
        return Plan(harness(None), command, max_output, mcp)
    if harness_name is None:
        raise click.UsageError(f"name a harness ({', '.join(HARNESSES)}) or use --openai")
    # After the harness's name click passes everything on as it came, the -- too: it
    # separates wrap's options from the harness's and is not the harness's own.
    if args[:1] == ("--",):
        args = args[1:]
    return Plan(harness(harness_name), args, max_output, mcp)
