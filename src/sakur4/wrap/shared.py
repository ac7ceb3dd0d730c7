"""The gateway a wrap runs its harness through, shared with every other wrap on the same
address: reused when one runs there (said, with who started it), else started as a
process of its own (:mod:`sakur4.wrap.hosted`); stopped by the last wrap out, never
while another wrap holds a lease on it (issue 41). While the harness runs, a watcher
says in one line if the gateway goes away."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from sakur4.backends.http import normalize_url
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.harnesses.find import Backend, find_backend, port_state
from sakur4.settings import Settings
from sakur4.wrap.hosted import log_path, spawn
from sakur4.wrap.leases import Leases, alive, started_at, stop_process

Echo = Callable[[str], None]

# Seconds a started gateway process may take to answer on its port (imports, bind); its
# backend's probe comes after and is waited for separately.
BIND_LIMIT = 120.0

# How often the watcher asks the gateway whether it is still there.
WATCH_EVERY = 2.0


def client_host(host: str) -> str:
    # A gateway bound to every interface is reached on loopback.
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104


def _start(s: Settings, found: Backend, url: str, leases: Leases, cwd: Path, echo: Echo) -> None:
    """Start the gateway process and wait until it answers on its port (lock held)."""
    served = s.model_copy(update={"backend": found.url})
    pid = spawn(served, cwd)
    start = started_at(pid)
    log = log_path(s)
    deadline = time.monotonic() + BIND_LIMIT
    while (state := asyncio.run(port_state(url))).kind != "sakur4":
        if not alive(pid, start) or time.monotonic() > deadline:
            stop_process(pid, start)
            raise BackendUnavailable(url, f"the gateway did not start ({state.kind}); log: {log}")
        time.sleep(0.2)
    leases.record(pid, os.getpid(), url)
    echo(
        f"sakur4 wrap: gateway {url} -> {found.url} ({found.identity.kind}, "
        f"window {found.identity.n_ctx or '?'}), pid {pid}; log {log}"
    )


def _reuse(s: Settings, url: str, leases: Leases, report: Mapping[str, Any], echo: Echo) -> None:
    backend = str(report.get("backend"))
    if s.backend and normalize_url(s.backend) != normalize_url(backend):
        raise SettingsError(
            f"the Sakur4 gateway at {url} serves {backend}, not {s.backend}: "
            "--port another to start a second gateway"
        )
    hosted = leases.hosted()
    who = (
        f"started by wrap pid {hosted.wrap_pid}; the last wrap out stops it"
        if hosted is not None
        else "not started by a wrap: it keeps running"
    )
    echo(f"sakur4 wrap: using the gateway already running at {url} -> {backend} ({who})")


@contextlib.contextmanager
def shared_gateway(s: Settings, cwd: Path, echo: Echo) -> Iterator[str]:
    """The gateway's URL for the block: reused or started, with this wrap's lease on it;
    at the end the lease is given back and, if this wrap was the last, the gateway it
    or another wrap started is stopped."""
    url = f"http://{client_host(s.gateway_host)}:{s.gateway_port}"
    leases = Leases(client_host(s.gateway_host), s.gateway_port)
    me = os.getpid()
    found: Backend | None = None
    while True:
        state = asyncio.run(port_state(url))
        if state.kind == "other":
            raise SettingsError(
                f"{url} is taken by something that is not a Sakur4 gateway: --port another"
            )
        if state.kind == "free" and found is None:
            # Looked for outside the lock: a server still loading may take minutes.
            said = lambda w: echo(f"sakur4 wrap: {w}")  # noqa: E731
            found = asyncio.run(find_backend(s.backend, waiting=said))
            continue  # the port again: another wrap may have started a gateway meanwhile
        with leases.locked():
            if asyncio.run(port_state(url)).kind != state.kind:
                continue  # changed while the lock was waited for
            # Taken first: a gateway started below never finds itself without a lease.
            leases.take(me)
            try:
                if state.kind == "sakur4":
                    _reuse(s, url, leases, state.report, echo)
                else:
                    assert found is not None
                    _start(s, found, url, leases, cwd, echo)
            except BaseException:
                leases.give_back(me)
                raise
        break
    try:
        yield url
    finally:
        _leave(leases, me, url, echo)


def _leave(leases: Leases, me: int, url: str, echo: Echo) -> None:
    with leases.locked():
        leases.give_back(me)
        others = leases.holders()
        hosted = leases.hosted()
        if hosted is None:
            return
        if others:
            pids = ", ".join(str(p) for p in others)
            echo(f"sakur4 wrap: the gateway at {url} stays up for wrap pid {pids}")
            return
        stop_process(hosted.pid, hosted.start)
        leases.forget()


class GatewayWatch:
    """Says once, in one line, that the gateway went away while the harness ran."""

    def __init__(self, url: str, echo: Echo) -> None:
        self.url, self.echo = url, echo
        self.done = threading.Event()
        self.gone = False
        self.thread = threading.Thread(target=self._run, name="gateway-watch", daemon=True)

    def __enter__(self) -> GatewayWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(timeout=10.0) as http:
            while not self.done.wait(WATCH_EVERY):
                try:
                    http.get(f"{self.url}/health")
                except httpx.TransportError as e:
                    if isinstance(e, httpx.TimeoutException):
                        continue  # busy, not gone
                    if not self.gone and not self.done.is_set():
                        self.echo(
                            f"sakur4 wrap: the gateway at {self.url} has gone away "
                            f"({type(e).__name__}): the harness's requests fail from now on"
                        )
                    self.gone = True
