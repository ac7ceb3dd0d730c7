"""One wrapped run: reuse the Sakur4 gateway on the port or start one in this process,
write the harness's files for the run into a temporary directory, run the harness in
the foreground with the terminal, and stop what was started when it exits.

Signals: a Ctrl-C typed in the terminal reaches the harness directly (it shares the
terminal's process group), so it is not sent twice; a SIGINT, SIGTERM or SIGHUP sent
to this process alone is forwarded. The harness's exit code is returned (128 + N when
a signal N ended it). The gateway's log goes to a file beside the store, not to the
terminal the harness draws on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import uvicorn

from sakur4.backends.http import normalize_url
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.gateway.app import create_app
from sakur4.harnesses.find import find_backend, gateway_ready, port_state, served_model
from sakur4.harnesses.recipes import TOLD_WINDOW, Harness, McpCommand, Target, launch
from sakur4.harnesses.save import edits, save
from sakur4.settings import Settings

# The probe runs its cache experiment while the gateway starts.
STARTUP_TIMEOUT = 300.0

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run was given: the harness, its arguments, and the output cap (None: the
    default share of the server's window)."""

    harness: Harness
    args: tuple[str, ...]
    max_output: int | None
    mcp: bool
    window: int | None = None  # the window told to the harness (None: TOLD_WINDOW)
    save: bool = False  # also write the configuration into the harness's own files


def default_output_cap(window: int | None) -> int:
    """An eighth of the window, between 256 and 4,096 tokens: room for an answer or an
    edit, never enough for a small model to fill the window by itself (issue 30)."""
    if window is None:
        return 1024
    return max(256, min(4096, window // 8))


def _log_to_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per backend call


@contextlib.contextmanager
def gateway_in_thread(settings: Settings) -> Iterator[str]:
    """Serve the gateway for ``settings`` on its host and port until the block exits."""
    app = create_app(settings)
    host, port = settings.gateway_host, settings.gateway_port
    # log_config=None: uvicorn's records go where the root logger sends them (the file).
    config = uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="sakur4-gateway", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.started:
            if not thread.is_alive():
                raise BackendUnavailable(
                    settings.backend or "?", "the gateway did not start (see its log)"
                )
            if time.monotonic() > deadline:
                raise BackendUnavailable(settings.backend or "?", "the gateway did not start")
            time.sleep(0.05)
        yield f"http://{_client_host(host)}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _client_host(host: str) -> str:
    # A gateway bound to every interface is reached on loopback.
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104


def mcp_command(s: Settings, project: Path | None) -> McpCommand:
    """``sakur4 serve`` as this installation runs it, on the run's store and project
    (None: the directory the harness starts it in, for a saved configuration).

    MCP clients start a server with a minimal environment, so the ``SAKUR4_*`` settings
    (and a ``PYTHONPATH`` that chose this installation) travel in the server's own ``env``."""
    env = {k: v for k, v in os.environ.items() if k.startswith("SAKUR4_") or k == "PYTHONPATH"}
    where = ("--project", str(project)) if project is not None else ()
    args = ("-m", "sakur4", "--store", str(s.store), *where, "serve")
    return McpCommand(sys.executable, args, env)


def _terminal_sent(signum: int) -> bool:
    """True when ``signum`` is a Ctrl-C the terminal sent to its whole foreground group
    (the harness got it too)."""
    if signum != signal.SIGINT:
        return False
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError):
        return False


def run_foreground(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> int:
    """Run ``argv`` with this terminal until it exits; its exit code (128 + N on signal N)."""
    # The user's own command, as they typed it: running it is the point.
    child = subprocess.Popen(list(argv), env=dict(env), cwd=cwd)  # noqa: S603

    def forward(signum: int, frame: FrameType | None) -> None:
        if not _terminal_sent(signum):
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code


def _resolve(argv: Sequence[str], h: Harness) -> list[str]:
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
    project = s.project_root()
    url = f"http://{_client_host(s.gateway_host)}:{s.gateway_port}"
    state = asyncio.run(port_state(url))
    token = s.http_token.get_secret_value() if s.http_token else None
    with contextlib.ExitStack() as stack:
        if state.kind == "other":
            raise SettingsError(
                f"{url} is taken by something that is not a Sakur4 gateway: --port another"
            )
        if state.kind == "sakur4":
            backend = str(state.report["backend"])
            if s.backend and normalize_url(s.backend) != normalize_url(backend):
                raise SettingsError(
                    f"the Sakur4 gateway at {url} serves {backend}, not {s.backend}: "
                    "--port another to start a second gateway"
                )
            echo(f"sakur4 wrap: reusing the Sakur4 gateway at {url} -> {backend}")
        else:
            found = asyncio.run(find_backend(s.backend))
            log = s.store.parent / "wrap-gateway.log"
            _log_to_file(log)
            served = s.model_copy(update={"backend": found.url})
            stack.enter_context(gateway_in_thread(served))
            echo(
                f"sakur4 wrap: gateway {url} -> {found.url} ({found.identity.kind}, "
                f"window {found.identity.n_ctx or '?'}); log {log}"
            )
        said = lambda w: echo(f"sakur4 wrap: {w}")  # noqa: E731
        report = asyncio.run(gateway_ready(url, STARTUP_TIMEOUT, said))
        window = report.get("window")
        echo(f"sakur4 wrap: dashboard {url}/sakur4/")
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
            window=plan.window or TOLD_WINDOW,
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
        if why:
            echo(f"sakur4 wrap: window told {target.window:,}: {why}")
        code = run_foreground(_resolve(run.argv, plan.harness), {**os.environ, **run.env}, project)
    return code
