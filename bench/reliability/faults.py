"""Resource faults: a full disk, a read-only store, a backend that never answers.

    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.faults \
        [--only disk|readonly|backend]

- **Full disk.** The store lives on a size-limited tmpfs (``mount -t tmpfs -o size=…``,
  which needs root). A filler file takes all but a few KiB; ``sakur4 serve`` writes
  notes until the disk is full and ``sakur4 index`` indexes a tree. Each must fail
  with an error naming the full disk, stay up (serve), leave nothing half-written
  (``PRAGMA integrity_check``, every acked note present, no refused one), and work
  again — without a restart — once the filler is deleted. (A gateway turn on a full
  disk is not run: its store writes go through the same ``Store.tx``.) Where
  mounting is not permitted the disk is emulated with RLIMIT_FSIZE on the ``sakur4
  serve`` process ("space returns" is a restart without the limit), and the run says
  so.
- **Read-only store.** A store with data, seen through a read-only bind mount
  (``mount --bind`` + ``remount,ro``; root ignores file modes, so chmod would prove
  nothing here). ``status`` and ``receipts`` read it (opened read-only); ``serve``,
  ``index``, ``remember`` and ``doctor`` must say the store is read-only, and the
  store must be unchanged afterwards.
- **A backend that never answers.** A socket that accepts and reads and never
  writes: ``sakur4 gateway`` must serve anyway, say on its terminal that it waits
  for the backend, answer a request with a 503 naming ``SAKUR4_BACKEND_TIMEOUT``, and
  stop within seconds on SIGTERM; ``sakur4 doctor`` and the MCP ``probe`` tool must
  fail within ``SAKUR4_BACKEND_TIMEOUT`` with a line that says so.
  Then a proxy in front of a real llama-server that starts swallowing requests (and,
  for a stream, stops after the first bytes of the answer): the gateway answers 503
  (or ends the stream with an error event) naming the timeout, stays up, and serves
  the next request once the backend answers again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reliability.invariants import Acks, StoreChecker
from reliability.procs import (
    SAKUR4,
    StdioPeer,
    sakur4_env,
    tool_call,
    tool_result,
)
from reliability.projectfiles import ProjectFiles

NOTE = "n" * 4000  # a note big enough that a few fill the last free pages


@dataclass
class Outcome:
    """One fault scenario: what was applied, what was seen, and what went wrong."""

    name: str
    fault: str
    observed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def see(self, line: str) -> None:
        self.observed.append(line)

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (root in a sandbox that allows it)."""
    probe = Path(tempfile.mkdtemp(prefix="sakur4-mount-probe-"))
    try:
        if _run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)]).returncode:
            return False
        _run(["umount", str(probe)])
        return True
    finally:
        probe.rmdir()


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A size-limited tmpfs, unmounted on the way out."""
    where = Path(tempfile.mkdtemp(prefix="sakur4-tmpfs-"))
    r = _run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)])
    if r.returncode:
        where.rmdir()
        raise RuntimeError(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield where
    finally:
        _run(["umount", "-l", str(where)])
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(disk: Path, leave: int) -> Path:
    """Take all of ``disk`` but about ``leave`` bytes with a filler file."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def _integrity(store: Path) -> str:
    from sakur4.store.db import connect

    conn = connect(store, readonly=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


# -- a full disk ---------------------------------------------------------------------


def full_disk_serve(work: Path) -> Outcome:
    """``sakur4 serve`` (stdio) writing notes onto a tmpfs until it is full, then freed."""
    out = Outcome("full disk: serve (stdio)", "store on a 2 MiB tmpfs, filled to the last KiB")
    project = work / "disk-project"
    project.mkdir(parents=True, exist_ok=True)
    with tmpfs("2m") as disk:
        store = disk / "sakur4.db"
        peer = StdioPeer(sakur4_env(store, project), work)
        try:
            out.expect(peer.initialize(), "no answer to initialize")
            acks = Acks()
            rid = 0

            def remember(text: str) -> dict[str, Any] | None:
                nonlocal rid
                rid += 1
                acks.notes_sent.add(text)
                peer.send(tool_call(rid, "remember", {"text": text}))
                answer = peer.next(60)
                out.expect(answer is not None, f"no answer to note {rid} (server gone?)")
                return answer

            assert remember("first note") is not None
            filler = fill(disk, leave=160 * 1024)
            refused = None
            for i in range(200):
                text = f"note {i} " + NOTE
                answer = remember(text)
                if answer is None:
                    break
                data = tool_result(answer)
                if data is None:
                    refused = answer
                    break
                acks.notes[text] = int(data["episode_id"])
            out.expect(refused is not None, "the disk never filled up")
            if refused is not None:
                message = str(refused["result"]["content"][0]["text"])
                out.see(f"after {len(acks.notes)} notes: {message}")
                out.expect(
                    # Sakur4's words: SQLite's own "database or disk is full" is not enough.
                    "the disk is full" in message,
                    f"error does not name the full disk: {message}",
                )
            ping = {"jsonrpc": "2.0", "id": "ping", "method": "ping"}
            out.expect(
                peer.send(ping) and peer.next(30) is not None,
                "serve stopped answering after the disk filled",
            )
            status = remember("still refused while full " + NOTE)
            out.expect(
                status is not None and tool_result(status) is None,
                "a write succeeded on a full disk",
            )
            filler.unlink()
            after = remember("written after space returned")
            ok = after is not None and tool_result(after) is not None
            out.expect(ok, f"no write after space returned: {after}")
            if ok and after is not None:
                acks.notes["written after space returned"] = int(tool_result(after)["episode_id"])  # type: ignore[index]
                out.see("space freed: the next note was stored without a restart")
        finally:
            code = peer.close()
            out.expect(code == 0, f"serve exit code {code} at EOF")
            out.expect(not peer.child.tracebacks(), f"traceback: {peer.child.stderr[-5:]}")
        found = StoreChecker(store).check(acks)
        out.expect(not found, f"store after the fault: {found}")
        out.see(
            f"integrity {_integrity(store)}; {len(acks.notes)} acked notes all present, "
            "refused ones absent"
        )
    return out


def full_disk_index(work: Path) -> Outcome:
    """``sakur4 index`` on a full disk: one clear line, exit 1, then a clean run after."""
    out = Outcome("full disk: index", "store on a 2 MiB tmpfs with 32 KiB free, 150 files")
    tree = work / "disk-tree"
    files = ProjectFiles(tree, __import__("random").Random(7))
    files.populate(150)
    with tmpfs("2m") as disk:
        store = disk / "sakur4.db"
        env = sakur4_env(store, tree)
        r = subprocess.run(
            [*SAKUR4, "project", "add", str(tree)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )  # creates the store (status only reads: it creates nothing)
        filler = fill(disk, leave=32 * 1024)
        r = subprocess.run([*SAKUR4, "index"], env=env, capture_output=True, text=True, check=False)
        out.see(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        out.expect(r.returncode == 1, f"index exit code {r.returncode}")
        out.expect("the disk is full" in r.stderr, "the error does not name the full disk")
        out.expect("Traceback" not in r.stderr, "a traceback reached the user")
        checker = StoreChecker(store, files)
        found = checker.check(Acks())
        out.expect(not found, f"half-indexed after the full disk: {found}")
        filler.unlink()
        r = subprocess.run([*SAKUR4, "index"], env=env, capture_output=True, text=True, check=False)
        out.expect(r.returncode == 0, f"index after space returned: {r.stderr[-300:]}")
        from reliability.invariants import index_matches

        found = checker.check(Acks()) + index_matches(store, files, files.snapshot())
        out.expect(not found, f"after space returned: {found}")
        out.see(
            f"space freed: index exit {r.returncode}, Ledger matches the tree, integrity "
            f"{_integrity(store)}"
        )
    return out


def full_disk_rlimit(work: Path, limit: int = 512 * 1024) -> Outcome:
    """The fallback where tmpfs cannot be mounted: RLIMIT_FSIZE on ``sakur4 serve``.

    The limit belongs to the process (raising another process's limit needs rights this
    fallback assumes it lacks), so "space returns" is a restart without the limit."""
    out = Outcome(
        "full disk (emulated): serve",
        f"RLIMIT_FSIZE {limit // 1024} KiB on the serve process (no tmpfs); space returns "
        "as a restart without the limit",
    )
    project = work / "rlimit-project"
    project.mkdir(parents=True, exist_ok=True)
    store = work / "rlimit" / "sakur4.db"
    store.parent.mkdir(parents=True, exist_ok=True)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    acks = Acks()
    peer = StdioPeer(sakur4_env(store, project), work, preexec=limited)
    try:
        out.expect(peer.initialize(), "no answer to initialize")
        refused = None
        for i in range(400):
            text = f"note {i} " + NOTE
            acks.notes_sent.add(text)
            peer.send(tool_call(i + 1, "remember", {"text": text}))
            answer = peer.next(60)
            data = tool_result(answer) if answer is not None else None
            if data is None:
                refused = answer
                break
            acks.notes[text] = int(data["episode_id"])
        message = str(((refused or {}).get("result") or {}).get("content") or refused)
        out.see(f"after {len(acks.notes)} notes: {message[:300]}")
        # write() fails with EFBIG here, not ENOSPC: SQLite calls that an I/O error.
        out.expect(
            "disk is full" in message or "disk I/O error" in message,
            "the error does not name a failed write",
        )
        ping = {"jsonrpc": "2.0", "id": "ping", "method": "ping"}
        out.expect(peer.send(ping) and peer.next(30) is not None, "serve stopped answering")
    finally:
        code = peer.close()
        out.expect(code == 0, f"serve exit code {code}")
        out.expect(not peer.child.tracebacks(), f"traceback: {peer.child.stderr[-5:]}")
    peer = StdioPeer(sakur4_env(store, project), work)
    try:
        peer.initialize()
        peer.send(tool_call(9999, "remember", {"text": "after the limit"}))
        answer = peer.next(60)
        out.expect(
            answer is not None and tool_result(answer) is not None,
            "no write after restarting without the limit",
        )
        if answer is not None and (data := tool_result(answer)) is not None:
            acks.notes["after the limit"] = int(data["episode_id"])
    finally:
        peer.close()
    found = StoreChecker(store).check(acks)
    out.expect(not found, f"store after the fault: {found}")
    out.see(
        f"restarted without the limit: note stored; integrity {_integrity(store)}; "
        f"{len(acks.notes)} acked notes present"
    )
    return out


# -- a read-only store ---------------------------------------------------------------


@contextlib.contextmanager
def read_only_view(directory: Path) -> Iterator[Path]:
    """``directory`` seen through a read-only bind mount; without mount rights (and not
    root, whom file modes do not stop) the directory itself with its write bits off."""
    view = Path(tempfile.mkdtemp(prefix="sakur4-ro-"))
    for cmd in (
        ["mount", "--bind", str(directory), str(view)],
        ["mount", "-o", "remount,bind,ro", str(view)],
    ):
        r = _run(cmd)
        if r.returncode:
            _run(["umount", str(view)])
            view.rmdir()
            if os.geteuid() == 0:
                raise RuntimeError(f"cannot make a read-only view: {r.stderr.strip()}")
            yield from _modes_read_only(directory)
            return
    try:
        yield view
    finally:
        _run(["umount", "-l", str(view)])
        with contextlib.suppress(OSError):
            view.rmdir()


def _modes_read_only(directory: Path) -> Iterator[Path]:
    paths = [directory, *directory.iterdir()]
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        p.chmod(modes[p] & ~0o222)
    try:
        yield directory
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def read_only_store(work: Path) -> Outcome:
    out = Outcome("read-only store", "store directory behind a read-only bind mount")
    project = work / "ro-project"
    files = ProjectFiles(project, __import__("random").Random(3))
    files.populate(10)
    home = work / "ro-store"
    home.mkdir(parents=True, exist_ok=True)
    store = home / "sakur4.db"
    env = sakur4_env(store, project)
    subprocess.run([*SAKUR4, "index"], env=env, capture_output=True, check=True)
    before = store.read_bytes()
    with read_only_view(home) as view:
        ro_env = sakur4_env(view / "sakur4.db", project)
        # Reads open the store read-only and work (issue 15, row 15); writes and doctor
        # say read-only.
        for args in (["status"], ["receipts"]):
            r = subprocess.run(
                [*SAKUR4, *args], env=ro_env, capture_output=True, text=True, check=False
            )
            out.see(f"sakur4 {args[0]}: exit {r.returncode}: {r.stdout.strip()[:120]}")
            out.expect(r.returncode == 0, f"{args[0]}: exit {r.returncode}: {r.stderr.strip()}")
        for args in (["index"], ["remember", "a note"], ["doctor"]):
            r = subprocess.run(
                [*SAKUR4, *args],
                env=ro_env,
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            said = (r.stderr.strip() or r.stdout.strip()).splitlines()
            line = next((x for x in said if "read-only" in x or "error" in x), said[-1:] or [""])
            out.see(f"sakur4 {args[0]}: exit {r.returncode}: {str(line)[:200]}")
            out.expect("Traceback" not in r.stderr + r.stdout, f"{args[0]}: traceback")
            out.expect(r.returncode == 1, f"{args[0]}: exit {r.returncode}")
            out.expect(
                "read-only" in r.stderr + r.stdout,
                f"{args[0]}: does not say read-only: {(r.stderr + r.stdout).strip()[-300:]}",
            )
        peer = StdioPeer(ro_env, work)
        started = peer.child
        code = started.wait(60) if not peer.initialize() else None
        if code is None:
            peer.close()
            out.problems.append("serve started on a read-only store (should refuse at once)")
        out.see(f"sakur4 serve: exit {code}: {(started.stderr or [''])[-1][:200]}")
        out.expect(
            any("read-only" in x for x in started.stderr),
            f"serve does not say read-only: {started.stderr[-2:]}",
        )
    out.expect(store.read_bytes() == before, "the store changed behind the read-only view")
    out.see(f"store unchanged after; integrity {_integrity(store)}")
    return out


# -- a backend that never answers ----------------------------------------------------


class _Listener:
    """A loopback listener; each accepted connection is kept and handed to :meth:`_take`."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
                self._take(conn)

    def _take(self, conn: socket.socket) -> None:
        """Nothing: the connection stays open and the request waits in its buffer."""

    def close(self) -> None:
        # A listening socket's close does not wake accept() (Linux): shut it down first.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.close()


class Blackhole(_Listener):
    """Accepts connections and never writes a byte."""


_METHODS = (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS")
_CHAT = b"POST /v1/chat/completions "


class Proxy(_Listener):
    """A TCP proxy to a real server that can be told to swallow every request ("silent"),
    only chat requests ("silent-chat"), or to stop forwarding an answer after its first
    ``stall_after`` bytes ("stall")."""

    def __init__(self, target_port: int, stall_after: int = 700) -> None:
        self.target = target_port
        self.mode = "pass"
        self.stall_after = stall_after
        super().__init__()

    def _take(self, conn: socket.socket) -> None:
        server = socket.create_connection(("127.0.0.1", self.target))
        self.conns.append(server)
        state = {"sent": 0, "swallow": 0}
        for a, b, up in ((conn, server, True), (server, conn, False)):
            threading.Thread(target=self._pump, args=(a, b, up, state), daemon=True).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, up: bool, state: dict[str, int]
    ) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if up:
                    if data[:8].split(b" ")[0] in _METHODS:  # a new request starts
                        state["swallow"] = self.mode == "silent" or (
                            self.mode == "silent-chat" and data.startswith(_CHAT)
                        )
                    if state["swallow"]:
                        continue  # read and never forwarded: the answer never comes
                    state["sent"] = 0
                    dst.sendall(data)
                    continue
                if self.mode == "stall":
                    room = self.stall_after - state["sent"]
                    if room <= 0:
                        continue
                    data = data[:room]
                state["sent"] += len(data)
                dst.sendall(data)


def _post_when_up(url: str, timeout: float) -> httpx.Response | None:
    """A small chat request, sent once the server at ``url`` accepts connections."""
    deadline = time.monotonic() + timeout
    body = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}
    while time.monotonic() < deadline:
        try:
            return httpx.post(url, json=body, timeout=timeout)
        except httpx.ConnectError:
            time.sleep(0.1)
    return None


def silent_backend_at_start(work: Path, timeout: float = 3.0) -> Outcome:
    """Gateway, doctor and the MCP probe tool against a socket that never answers."""
    out = Outcome(
        "backend never answers (start-up)",
        f"a socket that accepts and never writes; SAKUR4_BACKEND_TIMEOUT={timeout:g}",
    )
    hole = Blackhole()
    project = work / "silent-project"
    project.mkdir(parents=True, exist_ok=True)
    store = work / "silent" / "sakur4.db"
    env = sakur4_env(store, project, backend=hole.url, backend_timeout=f"{timeout:g}")
    try:
        from sakur4.backends.launcher import free_port

        port = free_port()
        err = work / "silent-gateway.err"
        with err.open("wb") as sink:
            gateway = subprocess.Popen(
                [*SAKUR4, "gateway", "--port", str(port)], env=env, stderr=sink
            )
        try:
            started = time.monotonic()
            r = _post_when_up(f"http://127.0.0.1:{port}/v1/chat/completions", timeout * 20)
            took = time.monotonic() - started
            message = r.json().get("error", {}).get("message", "") if r is not None else ""
            status = r.status_code if r is not None else None
            out.see(f"sakur4 gateway: HTTP {status} after {took:.1f} s: {message}")
            out.expect(status == 503, "the gateway did not answer 503 for its silent backend")
            out.expect("SAKUR4_BACKEND_TIMEOUT" in message, "the 503 does not name the timeout")
        finally:
            started = time.monotonic()
            gateway.terminate()
            try:
                gateway.wait(30)
            except subprocess.TimeoutExpired:
                gateway.kill()
                gateway.wait()
            took = time.monotonic() - started
        said = err.read_text(errors="replace")
        line = next((x for x in said.splitlines() if "timed out" in x), "")
        out.see(f"sakur4 gateway: stopped {took:.1f} s after SIGTERM; said: {line.strip()}")
        out.expect(took < 5.0, f"SIGTERM took {took:.1f} s")
        out.expect("waiting for it" in line, "the gateway does not say it waits for the backend")
        out.expect("Traceback" not in said, f"traceback: {said[-500:]}")
        started = time.monotonic()
        r = subprocess.run(
            [*SAKUR4, "doctor"], env=env, capture_output=True, text=True, check=False, timeout=120
        )
        took = time.monotonic() - started
        # The check's own line ("[fail] backend  …"): the store's path may say "backend" too.
        line = next((x for x in r.stdout.splitlines() if re.match(r"\s*\[\w+ *\] backend ", x)), "")
        out.see(f"sakur4 doctor: exit {r.returncode} after {took:.1f} s: {line.strip()}")
        out.expect("timed out" in line, "doctor does not report the timeout")
        out.expect("Traceback" not in r.stderr + r.stdout, "doctor: traceback")
        peer = StdioPeer(env, work)
        try:
            peer.initialize()
            started = time.monotonic()
            peer.send(tool_call(1, "probe", {"refresh": True}))
            answer = peer.next(120) or {}
            took = time.monotonic() - started
            text = str(((answer.get("result") or {}).get("content") or [{}])[0].get("text"))
            out.see(f"MCP probe tool after {took:.1f} s: {text[:200]}")
            out.expect("SAKUR4_BACKEND_TIMEOUT" in text, "the probe tool does not name the timeout")
        finally:
            peer.close()
    finally:
        hole.close()
    return out


def silent_backend_midway(work: Path, llama_url: str, timeout: float = 20.0) -> Outcome:
    """A gateway whose backend goes silent (and then stalls a stream) after start-up."""
    from reliability.load import _run_gateway
    from sakur4.backends.launcher import RUN_TO_CAP, free_port
    from sakur4.settings import Settings

    out = Outcome(
        "backend goes silent (gateway)",
        f"a proxy to llama-server swallows requests, then stalls a stream after "
        f"700 bytes; SAKUR4_BACKEND_TIMEOUT={timeout:g}",
    )
    port = int(llama_url.rsplit(":", 1)[1])
    proxy = Proxy(port)
    project = work / "midway-project"
    project.mkdir(parents=True, exist_ok=True)
    s = Settings.load(
        store=work / "midway.db",
        project=project,
        backend=proxy.url,
        backend_timeout=timeout,
        gateway_port=free_port(),
    )
    for attempt in range(3):
        # Start-up runs the probe's cache experiment under the same timeout; on a loaded
        # machine it can exceed a short one. That is not the fault under test: retry.
        try:
            server, thread = _run_gateway(s, None, [])
            break
        except RuntimeError:
            if attempt == 2:
                proxy.close()
                raise
            out.see(f"start-up {attempt + 1} timed out (loaded machine): started again")
    url = f"http://127.0.0.1:{s.gateway_port}/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}
    try:
        with httpx.Client(timeout=timeout * 6) as http:
            out.expect(http.post(url, json=body).status_code == 200, "no answer before the fault")
            proxy.mode = "silent"
            started = time.monotonic()
            r = http.post(url, json=body)
            took = time.monotonic() - started
            message = r.json().get("error", {}).get("message", "")
            out.see(f"silent: HTTP {r.status_code} after {took:.1f} s: {message}")
            out.expect(r.status_code == 503, f"status {r.status_code}")
            out.expect("SAKUR4_BACKEND_TIMEOUT" in message, "the error does not name the timeout")
            out.expect(took < timeout * 4, f"took {took:.1f} s for a {timeout:g} s timeout")
            proxy.mode = "silent-chat"  # the layout calls answer; the chat request does not
            started = time.monotonic()
            r = http.post(
                url, json={**body, "messages": [{"role": "user", "content": "Say ok again."}]}
            )
            took = time.monotonic() - started
            message = r.json().get("error", {}).get("message", "")
            out.see(f"silent chat only: HTTP {r.status_code} after {took:.1f} s: {message}")
            out.expect(
                r.status_code == 503
                and "/v1/chat/completions" in message
                and "SAKUR4_BACKEND_TIMEOUT" in message,
                "the chat timeout is not named",
            )
            proxy.mode = "stall"
            started = time.monotonic()
            with http.stream(
                "POST", url, json={**body, "stream": True, "max_tokens": 64, **RUN_TO_CAP}
            ) as st:
                text = "".join(st.iter_text())
            took = time.monotonic() - started
            last = [x for x in text.splitlines() if x.startswith("data:")][-1:] or [""]
            out.see(
                f"stalled stream: HTTP {st.status_code} after {took:.1f} s, last event "
                f"{last[0][:200]}"
            )
            out.expect(
                "SAKUR4_BACKEND_TIMEOUT" in text, "the stream does not end naming the timeout"
            )
            proxy.mode = "pass"
            r = http.post(url, json=body)
            out.see(f"backend answers again: HTTP {r.status_code}")
            out.expect(r.status_code == 200, f"no recovery: {r.status_code} {r.text[:200]}")
    finally:
        server.should_exit = True
        thread.join(60)
        proxy.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["disk", "readonly", "backend"], default=None)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sakur4-faults-"))
    outcomes: list[Outcome] = []
    mountable = can_mount()
    if args.only in (None, "disk"):
        if mountable:
            outcomes += [full_disk_serve(work), full_disk_index(work)]
        else:
            print("tmpfs cannot be mounted here: emulating a full disk with RLIMIT_FSIZE")
            outcomes.append(full_disk_rlimit(work))
    if args.only in (None, "readonly") and mountable:
        outcomes.append(read_only_store(work))
    if args.only in (None, "backend"):
        outcomes.append(silent_backend_at_start(work))
        from reliability.procs import llama_server

        with llama_server(ctx=4096, log=work / "llama.log") as srv:
            outcomes.append(silent_backend_midway(work, srv.url))
    for o in outcomes:
        print(f"== {o.name} ({o.fault}): {'ok' if not o.problems else 'PROBLEMS'}")
        for line in o.observed:
            print(f"   {line}")
        for line in o.problems:
            print(f"   PROBLEM {line}")
    failed = any(o.problems for o in outcomes)
    if not failed:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
