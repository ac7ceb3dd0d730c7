"""``sakur4 gateway`` as a user runs it, in a process of its own with its stderr kept in a
file, and the fault a start-up test needs: a backend that accepts and never answers.

The ``gateway_process`` fixture stops every gateway it started and then fails the test
if a gateway's log holds a traceback (issue 41: no traceback in any gateway log of the
test suite; the in-process gateways are checked by ``tracebacks.logged``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sakur4.backends.launcher import free_port
from tracebacks import traceback_in


def wait_for(what: str, done: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


class GatewayProcess:
    """``python -m sakur4 gateway`` (this tree's), its stderr kept in a file; ``env``:
    ``SAKUR4_*`` settings beside the store, project and backend."""

    def __init__(
        self, where: Path, backend: str, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = where / f"gateway-{self.port}.err"
        (where / "project").mkdir(exist_ok=True)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SAKUR4_")}
        environ |= {
            "SAKUR4_STORE": str(where / "store.db"),
            "SAKUR4_PROJECT": str(where / "project"),
            "SAKUR4_BACKEND": backend,
            **(env or {}),
        }
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sakur4", "gateway", "--port", str(self.port), *args],
                env=environ,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    @property
    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def answers(self) -> bool:
        try:
            httpx.get(self.url + "/sakur4/gateway", timeout=2)
        except httpx.HTTPError:
            return False
        return True

    def stop(self) -> float:
        """SIGTERM; the seconds it took to exit (killed after 30)."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return time.monotonic() - t0


@pytest.fixture
def gateway_process(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """Starts ``sakur4 gateway`` processes; stops them, then fails on a traceback logged."""
    started: list[GatewayProcess] = []

    def start(backend: str, *args: str, env: dict[str, str] | None = None) -> GatewayProcess:
        g = GatewayProcess(tmp_path, backend, *args, env=env)
        started.append(g)
        return g

    yield start
    for g in started:
        g.stop()
    for g in started:
        found = traceback_in(g.said)
        if found:
            pytest.fail(f"the gateway on port {g.port} logged a traceback:\n{found}")


class SilentBackend:
    """A fake backend, the fault: a socket that accepts connections and never answers
    (a server hung while starting, or one slow to answer the gateway's probe)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        # Closing a listening socket does not wake a thread blocked in accept() (Linux):
        # shut it down first, and wait for the thread, or it outlives the test and keeps
        # the indexer's pool off for every later test (a pool forks only alone).
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(10)
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent_backend() -> Iterator[SilentBackend]:
    silent = SilentBackend()
    yield silent
    silent.close()
