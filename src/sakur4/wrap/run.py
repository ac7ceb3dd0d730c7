"""One wrapped run: the Sakur4 gateway on the port, shared with other wraps
(:mod:`sakur4.wrap.shared`), the harness's files for the run written into a temporary
directory, and the harness run in the foreground with the terminal
(:mod:`sakur4.wrap.foreground`). The harness's exit code is returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from sakur4.errors import SettingsError
from sakur4.harnesses.base import Wrap
from sakur4.harnesses.find import gateway_ready, served_model
from sakur4.harnesses.recipes import McpCommand, Target, launch
from sakur4.harnesses.save import edits, save
from sakur4.settings import Settings
from sakur4.wrap.agents import agents_notes
from sakur4.wrap.foreground import run_foreground
from sakur4.wrap.shared import GatewayWatch, shared_gateway

# The probe runs its cache experiment while the gateway starts.
STARTUP_TIMEOUT = 300.0

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run was given: the harness, its arguments, and the output cap (None: the
    default share of the server's window)."""

    harness: Wrap
    args: tuple[str, ...]
    max_output: int | None
    mcp: bool
    window: int | None = None  # the window told to the harness (None: the harness's own)
    save: bool = False  # also write the configuration into the harness's own files
    agents: int = 1  # agents sharing the server (the advice's slots; subagents count)


def default_output_cap(window: int | None) -> int:
    """An eighth of the window, between 256 and 4,096 tokens: room for an answer or an
    edit, never enough for a small model to fill the window by itself (issue 30)."""
    if window is None:
        return 1024
    return max(256, min(4096, window // 8))


def mcp_command(s: Settings, project: Path | None) -> McpCommand:
    """``sakur4 serve`` as this installation runs it, on the run's store and project
    (None: the directory the harness starts it in, for a saved configuration).

    MCP clients start a server with a minimal environment, so the ``SAKUR4_*`` settings
    (and a ``PYTHONPATH`` that chose this installation) travel in the server's own
    ``env`` — the store too, never on the command line, where any user's ``ps`` would
    show a PostgreSQL URL's password."""
    env = {k: v for k, v in os.environ.items() if k.startswith("SAKUR4_") or k == "PYTHONPATH"}
    env["SAKUR4_STORE"] = str(s.store)
    where = ("--project", str(project)) if project is not None else ()
    args = ("-m", "sakur4", *where, "serve")
    return McpCommand(sys.executable, args, env)


def refuse_stored_password(s: Settings) -> None:
    """A configuration saved into a harness's own files is kept there for good: a store
    URL carrying a password is refused, with where to put the password instead."""
    url = urlsplit(str(s.store))
    if url.scheme.startswith("postgres") and url.password:
        raise SettingsError(
            "wrap --save: the store URL holds a password, which would be written into the "
            "harness's files; put it in ~/.pgpass (PostgreSQL's clients read it) or "
            "PGPASSWORD, and give the URL without it"
        )


def _resolve(argv: Sequence[str], h: Wrap) -> list[str]:
    found = shutil.which(argv[0])
    if found is None:
        what = h.describe if h.executable else "the command"
        raise SettingsError(f"{what}: {argv[0]!r} is not on PATH")
    return [found, *argv[1:]]


def _save(s: Settings, plan: Plan, target: Target, tmp: Path, echo: Echo) -> None:
    """Write the run's configuration, without its project, into the harness's files."""
    mcp = mcp_command(s, None) if plan.mcp else None
    kept = launch(plan.harness, replace(target, project=None, mcp=mcp), (), tmp)
    for path in save(edits(plan.harness, kept, os.environ)):
        echo(f"sakur4 wrap: saved the configuration in {path}")


def wrap(s: Settings, plan: Plan, echo: Echo) -> int:
    """Run ``plan`` through the gateway at ``s``'s host and port; the harness's exit code."""
    if plan.save:
        refuse_stored_password(s)  # before anything starts: a refusal leaves nothing behind
    project = s.project_root()
    token = s.http_token.get_secret_value() if s.http_token else None
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(shared_gateway(s, project, echo))
        said = lambda w: echo(f"sakur4 wrap: {w}")  # noqa: E731
        report = asyncio.run(gateway_ready(url, STARTUP_TIMEOUT, said))
        window = report.get("window")
        echo(f"sakur4 wrap: dashboard {url}/sakur4/")
        for note in agents_notes(s.store, str(report.get("backend")), plan.agents):
            echo(f"sakur4 wrap: {note}")
        model = asyncio.run(served_model(url))
        cap = plan.max_output or default_output_cap(window if isinstance(window, int) else None)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sakur4-wrap-")))
        target = Target(
            gateway=url,
            model=model,
            max_output=cap,
            project=project,
            mcp=mcp_command(s, project) if plan.mcp else None,
            token=token,
            window=plan.window,
            server_window=window if isinstance(window, int) else None,
        )
        if plan.save:
            _save(s, plan, target, tmp, echo)
        run = launch(plan.harness, target, plan.args, tmp)
        for name, text in run.files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        for note in run.notes:
            echo(f"sakur4 wrap: {note}")
        mcp = "sakur4 serve" if run.mcp else "none"
        echo(f"sakur4 wrap: {plan.harness.describe}, model {model}, output cap {cap}, MCP {mcp}")
        why = "as --window asked" if plan.window else plan.harness.window_why
        if why and run.window is not None:
            echo(f"sakur4 wrap: window told {run.window:,}: {why}")
        argv = _resolve(run.argv, plan.harness)
        with GatewayWatch(url, echo):
            code = run_foreground(argv, {**os.environ, **run.env}, project)
    return code
