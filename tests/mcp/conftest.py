"""The MCP test harness: the same server reached three ways.

- ``inprocess``: ``mcp.Client(server)`` on a server built in this process;
- ``stdio``: ``sakur4 serve`` spawned as a subprocess, spoken to over its stdin/stdout;
- ``http``: ``sakur4 serve --http --port 0`` spawned as a subprocess, over Streamable HTTP.

All three share one store file and one project, so a test can write through one
and look with its own store connection. Nothing here stands in for the SDK.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from sakur4.mcp import build_server
from sakur4.mcp.host import ToolHost
from sakur4.mcp.toolserver import ToolServer
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.projects import Project

TRANSPORTS = ["inprocess", "stdio", "http"]
SERVE = [sys.executable, "-m", "sakur4", "serve"]
STARTUP_TIMEOUT = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings(store_path: Path, project_dir: Path) -> Settings:
    return Settings.load(store=store_path, project=project_dir)


@pytest.fixture
def host(settings: Settings, store: Store, project: Project) -> ToolHost:
    return ToolHost(settings, store)


@pytest.fixture
def server(host: ToolHost) -> ToolServer:
    return build_server(host)


@pytest.fixture
def serve_env(store_path: Path, project: Project) -> dict[str, str]:
    """The environment of a spawned server: this test's store and project, nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAKUR4_")}
    env["SAKUR4_STORE"] = str(store_path)
    env["SAKUR4_PROJECT"] = str(project.root)
    return env


@pytest.fixture
def stdio_params(serve_env: dict[str, str], tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(command=SERVE[0], args=SERVE[1:], env=serve_env, cwd=str(tmp_path))


@dataclass
class HttpServer:
    """A ``sakur4 serve --http`` subprocess and what it said on stderr."""

    process: subprocess.Popen[bytes]
    url: str
    stderr: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.reader is not None:
            self.reader.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()


def _start_http(env: dict[str, str], *extra: str, cwd: Path | None = None) -> HttpServer:
    """Start ``sakur4 serve --http`` on a free loopback port; return once it listens."""
    proc = subprocess.Popen(
        [*SERVE, "--http", "--port", "0", *extra],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    url: list[str] = []
    ready = threading.Event()

    def drain() -> None:  # keeps the pipe from filling, and keeps what was said
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            if "Streamable HTTP on " in line and not url:
                url.append(line.rsplit(" ", 1)[1])
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    if not ready.wait(STARTUP_TIMEOUT) or not url:
        HttpServer(proc, "", lines, reader).stop()
        raise AssertionError("sakur4 serve --http did not start:\n" + "\n".join(lines))
    return HttpServer(proc, url[0], lines, reader)


@pytest.fixture
def start_http() -> Any:
    """Start another ``sakur4 serve --http`` (the caller stops it)."""
    return _start_http


@pytest.fixture
def serve_cmd() -> list[str]:
    return list(SERVE)


@pytest.fixture
def http_server(serve_env: dict[str, str], tmp_path: Path) -> Iterator[HttpServer]:
    srv = _start_http(serve_env, cwd=tmp_path)
    yield srv
    srv.stop()
    assert not any("Traceback" in line for line in srv.stderr), "\n".join(srv.stderr)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(transport: str, request: pytest.FixtureRequest) -> Client:
    """An (unentered) ``mcp.Client`` for this test's server over ``transport``."""
    if transport == "inprocess":
        return Client(request.getfixturevalue("server"))
    if transport == "stdio":
        return Client(request.getfixturevalue("stdio_params"))
    return Client(request.getfixturevalue("http_server").url)


class Results:
    """Reading tool results (a fixture: test modules here cannot import each other)."""

    @staticmethod
    def data(result: CallToolResult) -> dict[str, Any]:
        """The structured result of a successful call (fails the test on a tool error)."""
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return result.structured_content

    @staticmethod
    def error(result: CallToolResult) -> str:
        """The message of a tool error (fails the test on success)."""
        assert result.is_error, result.structured_content
        return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def results() -> type[Results]:
    return Results


# The 2026-07-28 protocol era: no handshake, this envelope on every request.
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


class RawStdio:
    """``sakur4 serve`` spoken to byte by byte: what a careless or hostile client can send."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            SERVE,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        # A thread, so a test waiting for an answer that never comes fails on a timeout.
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, raw: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(raw)
        self.process.stdin.flush()

    def request(self, rid: int, method: str, params: dict[str, Any] | None = None) -> bytes:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        return (json.dumps(msg) + "\n").encode()

    def call(
        self, rid: int, tool: str, args: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> bytes:
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if meta is not None:
            params["_meta"] = meta
        return self.request(rid, "tools/call", params)

    def receive(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer from sakur4 serve in {timeout} s") from None
        assert line, "the server closed its stdout"
        return dict(json.loads(line))

    def initialize_request(self, rid: int = 0) -> bytes:
        params = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        return self.request(rid, "initialize", params)

    def initialize(self) -> None:
        """The 2025 handshake (the 2026-07-28 era sends MODERN_META on each request)."""
        self.send(self.initialize_request())
        assert "result" in self.receive()
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

    def close(self) -> tuple[int, str]:
        """Close stdin (EOF) and return the exit code and what went to stderr."""
        assert self.process.stdin is not None
        assert self.process.stderr is not None
        self.process.stdin.close()
        try:
            err = self.process.stderr.read()
            code = self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("sakur4 serve did not exit at EOF") from None
        finally:
            self.reader.join(5)
            self.process.stderr.close()
            if self.process.stdout is not None:
                self.process.stdout.close()
        return code, err.decode(errors="replace")


@pytest.fixture
def modern_meta() -> dict[str, Any]:
    return dict(MODERN_META)


@pytest.fixture
def raw_stdio(serve_env: dict[str, str], tmp_path: Path) -> Iterator[RawStdio]:
    raw = RawStdio(serve_env, tmp_path)
    yield raw
    if raw.process.poll() is None:
        raw.process.kill()
        raw.process.wait()
    for pipe in (raw.process.stdin, raw.process.stdout, raw.process.stderr):
        if pipe is not None:
            pipe.close()
