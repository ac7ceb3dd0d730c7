"""Streamable HTTP: concurrent writers, and the guards in front of the endpoint."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sakur4.errors import SettingsError
from sakur4.mcp.http import bearer_token
from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project

CLIENTS = 8
NOTES_EACH = 200
TOKEN = "t0ken-for-tests-0123456789"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.anyio
async def test_concurrent_writers_lose_nothing(
    http_server: Any, store: Store, project: Project, results: Any
) -> None:
    started = time.perf_counter()

    async def writer(n: int) -> None:
        async with Client(http_server.url) as client:
            for i in range(NOTES_EACH):
                out = await client.call_tool("remember", {"text": f"writer {n} note {i}"})
                results.data(out)

    async with anyio.create_task_group() as tg:
        for n in range(CLIENTS):
            tg.start_soon(writer, n)
    elapsed = time.perf_counter() - started

    rows = store.query(
        "SELECT content FROM episodic_stream WHERE project_id = ? AND kind = 'note'",
        (project.id,),
    )
    contents = [r[0] for r in rows]
    expected = {f"writer {n} note {i}" for n in range(CLIENTS) for i in range(NOTES_EACH)}
    assert len(contents) == CLIENTS * NOTES_EACH
    assert set(contents) == expected  # every note, none twice
    print(f"{len(contents)} notes from {CLIENTS} HTTP clients in {elapsed:.1f} s")


def post(url: str, body: Any = INIT, **headers: str) -> httpx.Response:
    return httpx.post(url, json=body, headers={**MCP_HEADERS, **headers}, timeout=30)


def raw_post(url: str, content: bytes, content_type: str, token: str) -> httpx.Response:
    headers = {**MCP_HEADERS, "Content-Type": content_type, "Authorization": f"Bearer {token}"}
    return httpx.post(url, content=content, headers=headers, timeout=30)


def hang_up_mid_body(url: str) -> None:
    """Promise a body, send part of it, and go away."""
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            'Content-Length: 1000\r\n\r\n{"jsonrpc": "2.0", "id": 1'.encode()
        )


@pytest.mark.anyio
async def test_the_guards_in_front_of_the_endpoint(
    serve_env: dict[str, str], tmp_path: Path, start_http: Any, results: Any, store_path: Path
) -> None:
    env = {**serve_env, "SAKUR4_HTTP_TOKEN": TOKEN, "SAKUR4_MAX_REQUEST_BYTES": "65536"}
    srv = start_http(env, cwd=tmp_path)
    url, auth = srv.url, f"Bearer {TOKEN}"
    port = url.split(":")[2].split("/")[0]
    try:
        # A bearer token, when set, on every request.
        assert post(url).status_code == 401
        assert post(url, Authorization="Bearer wrong-token-wrong-token").status_code == 401
        assert post(url, Authorization=f"Basic {TOKEN}").status_code == 401
        assert post(url, Authorization=auth).status_code == 200
        assert post(url, Authorization=f"bearer {TOKEN}").status_code == 200  # any case

        # Origin and Host (DNS rebinding): only loopback names.
        assert post(url, Authorization=auth, Origin="http://evil.example").status_code == 403
        evil_origin = f"http://localhost.evil.example:{port}"
        assert post(url, Authorization=auth, Origin=evil_origin).status_code == 403
        assert post(url, Authorization=auth, Host=f"evil.example:{port}").status_code == 421
        for odd in ("null", "file://", "%%%"):  # sandboxed frames, file pages, garbage
            refused = post(url, Authorization=auth, Origin=odd)
            assert refused.status_code == 403, odd
            assert refused.json()["error"]["code"] == -32003  # a JSON-RPC error
        ours = f"http://127.0.0.1:{port}"
        assert post(url, Authorization=auth, Origin=ours).status_code == 200

        # Bounded bodies, and bad bodies get protocol errors.
        big = raw_post(url, b'{"x": "' + b"a" * 70_000 + b'"}', "application/json", TOKEN)
        assert big.status_code == 413
        # An MCP client parses every answer as JSON-RPC: a 413 is one too (issue 15, row 16).
        assert big.headers["content-type"] == "application/json"
        assert big.json()["error"]["code"] == -32600
        assert "over 65,536 bytes" in big.json()["error"]["message"]
        half = raw_post(url, b'{"jsonrpc": "2.0", "id": 1, "meth', "application/json", TOKEN)
        assert half.status_code == 400
        assert half.json()["error"]["code"] == -32700
        assert raw_post(url, b"hello", "text/plain", TOKEN).status_code == 415  # JSON only
        hang_up_mid_body(url)

        # Still serving; and a caller may only name projects registered with the server.
        stranger = tmp_path / "stranger"
        stranger.mkdir()
        client = httpx2.AsyncClient(headers={"Authorization": auth})
        async with client, Client(streamable_http_client(url, http_client=client)) as session:
            message = results.error(await session.call_tool("status", {"project": str(stranger)}))
            assert "not registered" in message
            assert results.data(await session.call_tool("status", {}))["episodes"] == 0
    finally:
        srv.stop()
    assert not any("Traceback" in line for line in srv.stderr), "\n".join(srv.stderr)
    check = open_store(store_path)
    try:
        assert not check.query("SELECT 1 FROM project WHERE root = ?", (str(stranger),))
    finally:
        check.close()


def test_refuses_to_start_off_loopback_without_a_token(
    serve_env: dict[str, str], serve_cmd: list[str]
) -> None:
    done = subprocess.run(
        [*serve_cmd, "--http", "--host", "0.0.0.0", "--port", "0"],
        env=serve_env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 1
    assert err.strip() == (
        "sakur4: error: refusing to serve MCP over HTTP on every interface ('0.0.0.0'), off "
        "loopback, without a bearer token: set SAKUR4_HTTP_TOKEN (at least 16 characters) "
        "or bind 127.0.0.1"
    )


@pytest.mark.parametrize(
    ("host", "token", "says"),
    [
        ("192.0.2.1", None, "without a bearer token"),
        ("::", None, "without a bearer token"),
        ("", None, "without a bearer token"),  # a wildcard bind is not loopback
        ("localhost.example", None, "without a bearer token"),
        ("127.0.0.1", "short", "too short"),
    ],
)
def test_unsafe_settings_are_refused(host: str, token: str | None, says: str) -> None:
    settings = Settings.load(http_host=host, http_token=token)
    with pytest.raises(SettingsError, match=says):
        bearer_token(settings)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    assert bearer_token(Settings.load(http_host=host)) is None
