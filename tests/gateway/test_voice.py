"""Issue 31, situation 7: a gateway that talks. One line per turn on its terminal
(session, tokens of window, verdict, reuse, time), one per failure (refused, backend
lost), turns quiet with ``-q``; ``sakur4 probe`` fails on what is not an inference
server and names a Sakur4 gateway. Real llama-server, real gateway; the plain HTTP
server is the situation itself (a URL that is not an inference server)."""

from __future__ import annotations

import http.server
import io
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from sakur4.backends.launcher import LlamaServer
from sakur4.cli import cli
from sakur4.receipts import Receipt
from sakur4.turns import voice

HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi."}]


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == voice.TERMINAL.name]


@pytest.mark.backend
def test_a_line_per_turn_and_per_refusal(
    llama_ring: LlamaServer, start_gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=voice.TERMINAL.name)
    gw = start_gateway(llama_ring.url)
    r = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"messages": HELLO, "max_tokens": 1},
        headers={"X-Sakur4-Session": "talking"},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    too_big = [*HELLO[:1], {"role": "user", "content": "word " * 9000}]
    refused = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"messages": too_big, "max_tokens": 1},
        headers={"X-Sakur4-Session": "too-big"},
        timeout=300,
    )
    assert refused.status_code == 400, refused.text
    gw.served.wait(2)
    said = _lines(caplog)
    turns = [m for level, m in said if m.startswith("talking turn 1: ")]
    assert len(turns) == 1, said
    assert "of 8,192 tokens" in turns[0]
    assert ", fits, " in turns[0]
    assert "reused " in turns[0]
    assert turns[0].endswith(" s")
    refusals = [m for level, m in said if level == logging.WARNING and "too-big" in m]
    assert len(refusals) == 1, said
    assert "too-big: refused: " in refusals[0]
    assert "everything older folded" in refusals[0]


def test_quiet_keeps_failures_and_drops_turns() -> None:
    out = io.StringIO()
    saved = (voice.TERMINAL.handlers, voice.TERMINAL.level, voice.TERMINAL.propagate)
    try:
        voice.speak_on(out, quiet=True)
        receipt = Receipt(1, "s", 1, 8192, 100, "CacheFirst", "", "fits", "reused", id=1)
        voice.turn(receipt, 0.0)
        voice.failure("backend lost (backend http://127.0.0.1:9: cannot connect)")
        voice.speak_on(out, quiet=False)
        voice.turn(receipt, 0.0)
    finally:
        voice.TERMINAL.handlers, voice.TERMINAL.level, voice.TERMINAL.propagate = saved
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "backend lost" in lines[0]
    assert "s turn 1: 100 of 8,192 tokens (1%), fits" in lines[1]


@pytest.fixture
def plain_http() -> Iterator[str]:
    """A plain HTTP server (Python's own), which is not an inference server."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_probe_of_a_plain_http_server_fails(plain_http: str, store_path: Path) -> None:
    # Was: exit 0 and a table of "?".
    result = CliRunner().invoke(cli, ["--store", str(store_path), "probe", plain_http])
    assert result.exit_code == 1, result.output
    assert "not an inference server" in result.output
    assert "Traceback" not in result.output


@pytest.mark.backend
def test_probe_knows_a_sakur4_gateway(
    llama_ring: LlamaServer, start_gateway: Any, store_path: Path
) -> None:
    # Was: "messages API not served" and a table, as if the gateway were a server.
    gw = start_gateway(llama_ring.url)
    result = CliRunner().invoke(cli, ["--store", str(store_path), "probe", gw.url])
    assert result.exit_code == 0, result.output
    assert f"a Sakur4 gateway in front of {llama_ring.url}" in result.output
    assert f"sakur4 probe {llama_ring.url}" in result.output
    assert "messages API" not in result.output
