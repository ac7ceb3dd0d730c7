"""The gateway ``sakur4 wrap`` starts: a process of its own, in its own session, that
outlives the wrap that started it while another wrap still uses it (issue 41).

Started as ``python -m sakur4.wrap.hosted`` with the wrap's settings in ``SAKUR4_*``
variables; it serves the gateway until SIGTERM (the last wrap out sends it) or until no
wrap holds a live lease (:mod:`sakur4.wrap.leases`): the second is for wraps killed
with SIGKILL, which give nothing back. Its log, and anything it prints, goes to
``wrap-gateway.log`` beside the store. In its own session, a Ctrl-C typed at a wrap's
terminal never reaches it: only the last wrap out decides when it stops.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from pydantic import SecretStr

from sakur4.gateway.app import create_app
from sakur4.settings import Settings
from sakur4.wrap.leases import Leases

# How often the gateway looks for live leases, and how many empty looks in a row end it
# (a wrap takes its lease before it starts the gateway, so one empty look is not a race).
WATCH_EVERY = 1.0
EMPTY_LOOKS = 2

# Open requests a stopping gateway lets finish before it closes them.
GRACEFUL = 5


def log_path(s: Settings) -> Path:
    return s.data_dir / "wrap-gateway.log"


def settings_env(s: Settings) -> dict[str, str]:
    """``s`` as the ``SAKUR4_*`` variables that rebuild it in another process."""
    env = {}
    for name in type(s).model_fields:
        value = getattr(s, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[f"SAKUR4_{name.upper()}"] = str(value)
    return env


def spawn(s: Settings, cwd: Path) -> int:
    """Start the gateway process for ``s`` (detached: its own session, output to the
    log); its process id. The caller holds the lease directory's lock."""
    log = log_path(s)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **settings_env(s)}
    argv = [sys.executable, "-m", "sakur4.wrap.hosted", str(os.getpid())]
    actions: Sequence[tuple[int | str, ...]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # posix_spawn, not Popen: the wrap may exit first, and no Popen object is then left
    # to warn about a child still running. chdir: the gateway files a request that names
    # no project under its working directory, as `sakur4 gateway` run there would.
    here = Path.cwd()
    os.chdir(cwd)
    try:
        return os.posix_spawn(sys.executable, argv, env, file_actions=actions, setsid=True)
    finally:
        os.chdir(here)


def _log_to_file(path: Path) -> None:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per backend call


def _watch(leases: Leases, server: uvicorn.Server) -> None:
    """End the gateway once no wrap holds a live lease (EMPTY_LOOKS looks in a row)."""
    log = logging.getLogger("sakur4.wrap")
    empty = 0
    while not server.should_exit:
        time.sleep(WATCH_EVERY)
        fd = leases.acquire()
        holders = leases.holders()
        empty = 0 if holders else empty + 1
        if empty < EMPTY_LOOKS:
            leases.release(fd)
            continue
        # Stopping for good: the lock stays held until this process exits, so a wrap
        # arriving now waits, then finds the port free and starts a gateway of its own.
        leases.forget()
        log.info("no wrap holds a lease any more: the gateway stops")
        server.should_exit = True
        return


def serve(s: Settings, args: Sequence[str]) -> None:
    """Serve the gateway for ``s`` until SIGTERM or the last lease is gone."""
    _log_to_file(log_path(s))
    logging.getLogger("sakur4.wrap").info(
        "gateway for wraps on %s:%s, started by wrap pid %s",
        s.gateway_host,
        s.gateway_port,
        args[0] if args else "?",
    )
    app = create_app(s)
    # log_config=None: uvicorn's records go where the root logger sends them (the file).
    config = uvicorn.Config(
        app,
        host=s.gateway_host,
        port=s.gateway_port,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL,
    )
    server = uvicorn.Server(config)
    leases = Leases(s.gateway_host, s.gateway_port)
    threading.Thread(target=_watch, args=(leases, server), name="leases", daemon=True).start()
    server.run()  # the main thread: uvicorn stops gracefully on SIGTERM and SIGINT


if __name__ == "__main__":
    serve(Settings.load(), sys.argv[1:])
