"""hearth's proxy in front of a llama-server, for bench/agents.py's ``hearth`` strategy.

hearth (PyPI ``hearth-llm`` 0.1.1, MIT, stdlib only: "keeps your local LLM contexts
warm") saves llama-server's slot 0 to disk after every answer (``POST
/slots/0?action=save``) and, before a request, restores the saved state of the longest
prefix of whole messages it has seen (``action=restore``), then forwards the request
with ``id_slot: 0``. It is optional and lives in a venv of its own under Sakur4's
cache directory:

    python -m venv ~/.cache/sakur4/hearth-venv
    ~/.cache/sakur4/hearth-venv/bin/pip install 'hearth-llm==0.1.1'

It runs in attach mode (``hearth serve --upstream URL --cache-dir DIR``): the server
must run with ``--slot-save-path DIR``, the same directory (its README).

hearth keys a saved state by the messages *and the answer it relayed* (role and
content of each; a tool call's content counts as ""), as a harness sends the model's
own answer back. The scripted agent sends its scripted answer instead, so between
hearth and the server sits :func:`answer_relay`: it passes every request through and
gives each chat answer the content the agent will send back as its next assistant
message (the request carries it in :data:`SAID`, which the relay removes). Without it
hearth would never find a saved prefix here; with it hearth sees what it would see
behind a real harness. What the server computes is untouched.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from processes import answering

from sakur4.backends.launcher import free_port

VERSION = "0.1.1"
CHAT = "/v1/chat/completions"
# The request field that carries the agent's next assistant content to the relay.
SAID = "x_bench_said"


def venv(cache_dir: Path) -> Path:
    return cache_dir / "hearth-venv"


def absent(cache_dir: Path) -> str | None:
    """Why the strategy cannot run (None: it can)."""
    exe = venv(cache_dir) / "bin" / "hearth"
    if not exe.is_file():
        return f"hearth-llm {VERSION} is not installed ({exe} missing; see bench/hearth.py)"
    return None


def said_answer(body: bytes, said: str) -> bytes:
    """A chat answer whose message is ``said`` (no tool calls): what the agent sends back."""
    answer = json.loads(body)
    message = answer["choices"][0]["message"]
    message["content"] = said
    message.pop("tool_calls", None)
    return json.dumps(answer).encode()


@contextmanager
def answer_relay(upstream: str) -> Iterator[str]:
    """A loopback HTTP relay to ``upstream`` that rewrites chat answers (module doc)."""

    class Relay(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def _forward(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            said = None
            if body and self.path.startswith(CHAT):
                payload = json.loads(body)
                said = payload.pop(SAID, None)
                body = json.dumps(payload).encode()
            try:
                r = httpx.request(
                    method,
                    upstream + self.path,
                    content=body,
                    headers={"Content-Type": "application/json"},
                    timeout=None,
                )
            except httpx.HTTPError as e:  # the server is down (a restart): as a proxy says it
                self.send_error(502, f"upstream: {e}")
                return
            data = r.content
            if said is not None and r.status_code == 200:
                data = said_answer(data, said)
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._forward("GET")

        def do_POST(self) -> None:
            self._forward("POST")

        def do_DELETE(self) -> None:
            self._forward("DELETE")

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Relay)
    thread = threading.Thread(target=server.serve_forever, name="hearth-relay", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def proxy(
    cache_dir: Path, upstream: str, saves: Path, log: Path, wait_s: float = 60.0
) -> Iterator[str]:
    """hearth in front of ``upstream`` (whose ``--slot-save-path`` is ``saves``); yields
    its URL once it answers ``/hearth/stats``."""
    port = free_port()
    exe = venv(cache_dir) / "bin" / "hearth"
    args = [str(exe), "serve", "--upstream", upstream, "--port", str(port)]
    args += ["--cache-dir", str(saves)]
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    with answering(proc, log, f"{url}/hearth/stats", "hearth", wait_s, 0.3):
        yield url
