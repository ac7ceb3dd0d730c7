"""Sakur4's processes as the harnesses run them: spawned, watched, killed by their own pid.

Every process here is started by the harness and stopped by the pid it got back
(``SIGKILL`` for a crash, ``SIGTERM`` for a clean stop); nothing is ever killed by
name. What a process writes to stderr is kept, so a run can assert that no
traceback reached the user.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SAKUR4 = [sys.executable, "-m", "sakur4"]


def sakur4_env(store: Path, project: Path, **extra: str) -> dict[str, str]:
    """A child's environment: this store and project, no other SAKUR4_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAKUR4_")}
    env["SAKUR4_STORE"] = str(store)
    env["SAKUR4_PROJECT"] = str(project)
    env.update({f"SAKUR4_{k.upper()}": v for k, v in extra.items()})
    return env


def rss_kib(pid: int) -> int | None:
    """Resident memory of a live process, from /proc (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Child:
    """A spawned process and everything it said on stderr."""

    proc: subprocess.Popen[bytes]
    name: str
    stderr: list[str] = field(default_factory=list)
    _readers: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash. Waits for the process to be gone."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._join()

    def stop(self, grace: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._join()
        return int(self.proc.returncode)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._join()
        return int(code)

    def _join(self) -> None:
        for t in self._readers:
            t.join(5)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def tracebacks(self) -> list[str]:
        return [line for line in self.stderr if "Traceback" in line]


def _drain(pipe: IO[bytes], into: list[str], watch: queue.Queue[str] | None) -> None:
    for raw in pipe:
        line = raw.decode(errors="replace").rstrip("\n")
        into.append(line)
        if watch is not None:
            watch.put(line)
    if watch is not None:
        watch.put("")


def spawn(
    args: Sequence[str],
    env: dict[str, str],
    *,
    name: str,
    cwd: Path | None = None,
    stdin: bool = False,
    stdout: bool = False,
    watch: queue.Queue[str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> Child:
    """Start ``args``; stderr is always read (into :attr:`Child.stderr` and ``watch``)."""
    proc = subprocess.Popen(
        list(args),
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=preexec,
    )
    child = Child(proc, name)
    assert proc.stderr is not None
    reader = threading.Thread(target=_drain, args=(proc.stderr, child.stderr, watch), daemon=True)
    reader.start()
    child._readers.append(reader)
    return child


def wait_for_line(watch: queue.Queue[str], marker: str, timeout: float) -> str | None:
    """The first stderr line containing ``marker`` (None: timed out or the stream ended)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = watch.get(timeout=left)
        except queue.Empty:
            return None
        if line == "":
            return None
        if marker in line:
            return line
    return None


class StdioPeer:
    """``sakur4 serve`` over its stdin/stdout, one JSON-RPC line at a time.

    A reader thread puts every answer on a queue, so the caller can pipeline requests
    and kill the server at a moment of its choosing.
    """

    def __init__(
        self, env: dict[str, str], cwd: Path, preexec: Callable[[], None] | None = None
    ) -> None:
        self.child = spawn(
            [*SAKUR4, "serve"],
            env,
            name="serve-stdio",
            cwd=cwd,
            stdin=True,
            stdout=True,
            preexec=preexec,
        )
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.raw: list[bytes] = []
        out = self.child.proc.stdout
        assert out is not None
        self._reader = threading.Thread(target=self._read, args=(out,), daemon=True)
        self._reader.start()
        self.child._readers.append(self._reader)

    def _read(self, out: IO[bytes]) -> None:
        for line in out:
            try:
                msg = json.loads(line)
            except ValueError:
                self.raw.append(line)  # not JSON on the wire: the caller reports it
                continue
            self.answers.put(msg if isinstance(msg, dict) else {"batch": msg})
        self.answers.put(None)

    def send(self, msg: dict[str, Any] | bytes) -> bool:
        """Write one line; False when the server is gone."""
        data = msg if isinstance(msg, bytes) else (json.dumps(msg) + "\n").encode()
        stdin = self.child.proc.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    def initialize(self, timeout: float = 60.0) -> bool:
        self.send(initialize_request(0))
        answer = self.next(timeout)
        if answer is None or "result" not in answer:
            return False
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return True

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next answer, or None (timed out, or the server closed stdout)."""
        try:
            return self.answers.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def close(self, timeout: float = 30.0) -> int:
        """EOF on stdin; the server answers what it read and exits."""
        stdin = self.child.proc.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            return self.child.wait(timeout)
        except subprocess.TimeoutExpired:
            self.child.kill()
            raise


def initialize_request(rid: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "sakur4-reliability", "version": "0"},
        },
    }


def tool_call(rid: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": tool, "arguments": args},
    }


def tool_result(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The structured result of a successful tool call, None for any error."""
    result = answer.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        return None
    data = result.get("structuredContent")
    return data if isinstance(data, dict) else None


def start_http_serve(env: dict[str, str], cwd: Path, timeout: float = 90.0) -> tuple[Child, str]:
    """``sakur4 serve --http --port 0``; returns once it announced its URL."""
    watch: queue.Queue[str] = queue.Queue()
    child = spawn(
        [*SAKUR4, "serve", "--http", "--port", "0"], env, name="serve-http", cwd=cwd, watch=watch
    )
    line = wait_for_line(watch, "Streamable HTTP on ", timeout)
    if line is None:
        child.kill()
        raise RuntimeError("sakur4 serve --http did not start:\n" + "\n".join(child.stderr))
    return child, line.rsplit(" ", 1)[1]


def start_gateway(env: dict[str, str], cwd: Path, port: int, timeout: float = 300.0) -> Child:
    """``sakur4 gateway`` on ``port``; returns once /health answers (the probe has run)."""
    import httpx

    child = spawn([*SAKUR4, "gateway", "--port", str(port)], env, name="gateway", cwd=cwd)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if not child.alive():
                raise RuntimeError("sakur4 gateway exited:\n" + "\n".join(child.stderr[-20:]))
            with contextlib.suppress(httpx.HTTPError):
                if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return child
            time.sleep(0.1)
    child.kill()
    raise RuntimeError("sakur4 gateway did not become healthy:\n" + "\n".join(child.stderr[-20:]))


@contextlib.contextmanager
def llama_server(ctx: int = 8192, parallel: int = 1, log: Path | None = None) -> Iterator[Any]:
    """A real llama-server from the project's set-up, stopped by its pid on exit."""
    from sakur4.backends.launcher import LlamaServer, ServerFlags, ensure_model, find_llama_server
    from sakur4.settings import Settings

    s = Settings.load()
    flags = ServerFlags(ctx=ctx, parallel=parallel)
    server = LlamaServer(
        find_llama_server(s), ensure_model(s), flags, log_path=log, die_with_parent=True
    )
    with server:
        yield server
