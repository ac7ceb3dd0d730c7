"""Who uses a gateway that ``sakur4 wrap`` started: one lease file per wrap, so the last
wrap out stops it and a second wrap never loses it mid-turn (issue 41).

A gateway's address has a directory of its own under the user's runtime directory
(``$XDG_RUNTIME_DIR``, else the system's temporary directory), keyed by host and port,
not by store: two wraps on one port share one gateway whatever their stores. In it:

- ``lock``: taken (``flock``) around every change: a gateway started, a lease taken or
  given back, a gateway stopped. The kernel drops it when its holder dies, even by
  SIGKILL, so a killed wrap never leaves it held.
- ``gateway.json``: the gateway a wrap started (its process id and the starting wrap's),
  absent for a gateway started by hand (``sakur4 gateway``), which no wrap stops.
- ``lease-PID``: one per wrap using the gateway, holding the wrap's process start time.
  A lease whose process is gone (or whose id now names another process) is stale and
  counts for nothing, so a wrap killed with SIGKILL never keeps the gateway up.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GATEWAY_FILE = "gateway.json"
LEASE_PREFIX = "lease-"

# How long a stopped gateway may take to finish its open requests and free its port.
STOP_GRACE = 30.0


def runtime_dir() -> Path:
    """Where the per-address directories live (per user; cleared at reboot on most systems)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"sakur4-{os.getuid()}"


def started_at(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux: ``/proc/PID/stat`` field 22), or None
    when it is gone or a zombie. Elsewhere "" for a live process: only liveness is
    checked there."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "" if _exists(pid) else None
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = stat.rsplit(")", 1)[1].split()
    # A zombie has ended; in a container whose first process reaps nothing it stays.
    return None if fields[0] in ("Z", "X") else fields[19]


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive(pid: int, start: str | None) -> bool:
    """Whether ``pid`` is still the process that started at ``start``."""
    now = started_at(pid)
    return now is not None and (start is None or not now or now == start)


@dataclass(frozen=True, slots=True)
class Hosted:
    """A gateway a wrap started: its process, and the wrap that started it."""

    pid: int
    start: str | None
    wrap_pid: int
    url: str


class Leases:
    """The lease directory of the gateway at ``host:port``."""

    def __init__(self, host: str, port: int, root: Path | None = None) -> None:
        safe = host.replace(":", "_").replace("/", "_")
        self.dir = (root or runtime_dir()) / f"gateway-{safe}-{port}"

    def acquire(self) -> int:
        """Take the directory's lock (waits for another holder); the descriptor to
        :meth:`release`. A process that never releases it holds it until it exits."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def release(self, fd: int) -> None:
        os.close(fd)  # closing the only descriptor releases the lock

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's lock for the block."""
        fd = self.acquire()
        try:
            yield
        finally:
            self.release(fd)

    def take(self, pid: int) -> None:
        """Record that wrap ``pid`` uses the gateway (call with the lock held)."""
        (self.dir / f"{LEASE_PREFIX}{pid}").write_text(started_at(pid) or "")

    def give_back(self, pid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / f"{LEASE_PREFIX}{pid}").unlink()

    def holders(self) -> list[int]:
        """The wraps whose leases are live; stale leases are removed on the way."""
        live = []
        for path in sorted(self.dir.glob(f"{LEASE_PREFIX}*")):
            try:
                pid = int(path.name.removeprefix(LEASE_PREFIX))
                start = path.read_text().strip() or None
            except (ValueError, OSError):
                continue
            if alive(pid, start):
                live.append(pid)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return live

    def hosted(self) -> Hosted | None:
        """The gateway a wrap started here, if it still runs."""
        try:
            raw = json.loads((self.dir / GATEWAY_FILE).read_text())
            found = Hosted(int(raw["pid"]), raw.get("start"), int(raw["wrap_pid"]), raw["url"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if alive(found.pid, found.start) else None

    def record(self, pid: int, wrap_pid: int, url: str) -> None:
        """Record the gateway process ``pid`` that wrap ``wrap_pid`` started."""
        info = {"pid": pid, "start": started_at(pid), "wrap_pid": wrap_pid, "url": url}
        (self.dir / GATEWAY_FILE).write_text(json.dumps(info))

    def forget(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / GATEWAY_FILE).unlink()


def stop_process(pid: int, start: str | None, grace: float = STOP_GRACE) -> None:
    """SIGTERM ``pid`` and wait for it to end; SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid, start):
        _reap(pid)
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            grace, deadline = 0.0, time.monotonic() + 5.0
        time.sleep(0.1)


def _reap(pid: int) -> None:
    # The wrap that started the gateway is its parent: collect it, or it stays a zombie
    # (and "alive" by /proc) until this process exits.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
