"""How a server on this machine was started, as the operating system shows it: the
command line of the process listening on the URL's port (Linux ``/proc``).

A llama-server does not report ``--checkpoint-min-step`` (-cms) in ``/props``,
``/slots`` or its start-up log (b11434, checked), but its command line says it. Only a
server on a loopback address is looked up, only a process of the same user can be
read, and anything unreadable is None (the setting then says it).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PROC = Path("/proc")
_LISTEN = "0A"  # TCP state of a listening socket in /proc/net/tcp


def _loopback_port(url: str) -> int | None:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return None
    if not loopback:
        return None
    return parts.port or (443 if parts.scheme == "https" else 80)


def _listening_inodes(port: int, proc: Path) -> set[str]:
    found = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.add(f[9])
    return found


@dataclass(frozen=True, slots=True)
class Started:
    """How the process listening on a port was started: its command line and environment."""

    command: tuple[str, ...]
    environment: Mapping[str, str]


def _split(raw: bytes) -> list[str]:
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def listening_process(url: str, proc: Path = PROC) -> Started | None:
    """How the process listening on ``url``'s port was started (None: not on this
    machine, or not readable)."""
    port = _loopback_port(url)
    if port is None:
        return None
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port, proc)}
    if not inodes:
        return None
    for pid in (p for p in proc.iterdir() if p.name.isdigit()):
        try:
            fds = [os.readlink(fd) for fd in (pid / "fd").iterdir()]
        except OSError:
            continue  # another user's, or gone
        if inodes.intersection(fds):
            try:
                command = _split((pid / "cmdline").read_bytes())
                pairs = [e.partition("=") for e in _split((pid / "environ").read_bytes())]
            except OSError:
                return None
            return Started(tuple(command), {k: v for k, _, v in pairs})
    return None


def flag_value(command: tuple[str, ...], *names: str) -> str | None:
    """The value given to any of ``names`` on ``command`` (``-x V`` or ``--x=V``; the
    last one given wins)."""
    value = None
    for i, arg in enumerate(command):
        key, eq, given = arg.partition("=")
        if key in names:
            if eq:
                value = given
            elif i + 1 < len(command):
                value = command[i + 1]
    return value
