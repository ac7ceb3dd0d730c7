"""Regression tests for the defects the reliability harnesses found (docs/RELIABILITY.md).

Each was a crash, a traceback or an unclear error on bad input; each input here is
the smallest one the fuzzer or the fault harness found (or an equivalent built on
purpose).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlean
from reliability.faults import can_mount, read_only_view
from reliability.fuzz import Tracebacks, hang_up
from reliability.load import _run_gateway
from reliability.procs import SAKUR4, sakur4_env

from sakur4.backends.launcher import LlamaServer, free_port
from sakur4.doctor import diagnose
from sakur4.errors import StoreCorrupt, StoreUnavailable
from sakur4.settings import Settings
from sakur4.store import open_store
from served import Served


def _schema_with_bytes(path: Path, sql_hex: str) -> None:
    """A store whose schema text holds bytes that are not UTF-8 (as damage leaves it)."""
    c = sqlean.connect(str(path))
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.execute("PRAGMA writable_schema = ON")
    c.execute(f"UPDATE sqlite_master SET sql = CAST(x'{sql_hex}' AS TEXT) WHERE name = 't'")
    c.commit()
    c.close()


def test_schema_text_that_is_not_utf8_is_a_corrupt_store(tmp_path: Path) -> None:
    # Found by fuzzing doctor/open_store on flipped bytes: the driver could not decode
    # its own error message and raised UnicodeDecodeError out of open_store.
    store = tmp_path / "s.db"
    _schema_with_bytes(store, "43524541544520979797")  # "CREATE " + 0x97 0x97 0x97
    with pytest.raises(StoreCorrupt, match="not UTF-8"):
        open_store(store)
    r = subprocess.run(
        [sys.executable, "-m", "sakur4", "--store", str(store), "status"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1
    assert "not a usable SQLite database" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_migration_name_that_is_not_text_is_a_corrupt_store(tmp_path: Path) -> None:
    # Found by fuzzing: a damaged schema_migrations row (NULL or a blob) made open_store
    # and doctor fail with "TypeError: sequence item 0: expected str instance".
    store = tmp_path / "s.db"
    open_store(store).close()
    c = sqlean.connect(str(store))
    c.execute("INSERT INTO schema_migrations (name) VALUES (x'80ff')")
    c.commit()
    c.close()
    with pytest.raises(StoreCorrupt, match="schema_migrations holds"):
        open_store(store)
    report = diagnose(store=store)
    schema = next(ch for ch in report.checks if ch.name == "schema")
    assert schema.level == "fail"
    assert "schema_migrations holds" in schema.detail


@pytest.mark.skipif(
    os.geteuid() == 0 and not can_mount(),
    reason="root without mount rights: file modes do not stop root, nothing to show",
)
def test_a_read_only_store_is_named_read_only(tmp_path: Path) -> None:
    # Found by the fault harness: on a read-only directory SQLite says only "unable to
    # open database file", and doctor's every check repeated it without the cause.
    home = tmp_path / "home"
    home.mkdir()
    open_store(home / "sakur4.db").close()
    with read_only_view(home) as view:
        with pytest.raises(StoreUnavailable, match="is read-only"):
            open_store(view / "sakur4.db")
        report = diagnose(store=view / "sakur4.db")
    store = next(ch for ch in report.checks if ch.name == "store")
    assert store.level == "fail"
    assert "is read-only" in store.detail


def test_gateway_waiting_for_its_backend_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    # Found by the fault harness: a start-up that failed on the backend printed
    # Starlette's lifespan traceback above the one-line error. Since issue 31 the
    # gateway does not fail: it waits for the backend, and says so in one line.
    project = tmp_path / "project"
    project.mkdir()
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: the backend is down
    err = tmp_path / "gateway.err"
    with err.open("wb") as sink:
        proc = subprocess.Popen(
            [*SAKUR4, "gateway", "--port", str(free_port())],
            env=sakur4_env(tmp_path / "s.db", project, backend=down),
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + 60
        while "waiting for it" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(30)
    said = err.read_text()
    assert f"backend {down}: " in said
    assert "waiting for it" in said
    assert "Traceback" not in said, said


@dataclass
class Gateway:
    url: str  # its chat completions endpoint
    served: Served  # to wait until a request is done, its log lines included


@pytest.fixture(scope="module")
def gateway(llama_ring: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway for the module: its start-up runs the probe's cache experiment."""
    where = tmp_path_factory.mktemp("defects-gateway")
    project = where / "project"
    project.mkdir()
    s = Settings.load(
        store=where / "gw.db", project=project, backend=llama_ring.url, gateway_port=free_port()
    )
    server, thread = _run_gateway(s, None, [])
    yield Gateway(f"http://127.0.0.1:{s.gateway_port}/v1/chat/completions", Served(server))
    server.should_exit = True
    thread.join(60)


@pytest.mark.backend
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"[" * 100_000, "nested too deeply"),  # was a bare 500 (RecursionError)
        (b'{"messages": [{"role": "user", "content": "a\\ud800"}]}', "lone UTF-16 surrogate"),
        (
            b'{"messages": [{"role": "user", "content": "ok"}], "model": "\\udfff"}',
            "lone UTF-16 surrogate",
        ),  # was a 500 when the body was forwarded
        (b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', "not UTF-8"),
    ],
)
def test_gateway_answers_bad_bodies_with_400(gateway: Gateway, body: bytes, words: str) -> None:
    with Tracebacks() as crashes:
        arrived = gateway.served.arrived + 1
        r = httpx.post(
            gateway.url, content=body, headers={"content-type": "application/json"}, timeout=60
        )
        gateway.served.wait(arrived)  # uvicorn would log a crash just after answering
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"]
    assert not crashes.seen, crashes.seen


@pytest.mark.backend
def test_gateway_client_hanging_up_mid_body_is_not_a_traceback(gateway: Gateway) -> None:
    # Found by fuzzing: uvicorn logged "Exception in ASGI application" (ClientDisconnect).
    with Tracebacks() as crashes:
        arrived = gateway.served.arrived + 1
        hang_up(gateway.url, b'{"messages": [', {"content-type": "application/json"})
        gateway.served.wait(arrived)  # no answer to wait for: the request's task, ended
        r = httpx.post(
            gateway.url,
            json={"messages": [{"role": "user", "content": "ok?"}], "max_tokens": 1},
            timeout=120,
        )
    assert r.status_code == 200
    assert not crashes.seen, crashes.seen


def test_hang_up_helper_really_sends_a_partial_body() -> None:
    """The helper the test above relies on: the server must see fewer bytes than promised."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    hang_up(f"http://127.0.0.1:{port}/x", b"abc", {"a": "b"})
    conn, _ = server.accept()
    data = b""
    while chunk := conn.recv(4096):
        data += chunk
    conn.close()
    server.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Content-Length: 103" in head
    assert body == b"abc"
