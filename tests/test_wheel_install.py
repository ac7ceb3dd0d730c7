"""The install for people who already run a server: the built wheel, installed into a
fresh virtualenv (no checkout on its path), runs `sakur4 wrap --help` and `sakur4 probe`.

The wheel is built with pip (``pip wheel --no-deps .``: the build backend, hatchling,
comes through pip's own configuration, as for any user) and installed with its
dependencies the same way. The server is a fake: a few lines of ``http.server``
answering the endpoints llama-server's identification reads (``/props``, ``/health``,
``/v1/models``, ``/slots``) in their shapes, so the test needs no built llama-server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import venv
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "sakur4"
WINDOW = 4096


class _FakeLlamaServer(BaseHTTPRequestHandler):
    """llama-server's identification endpoints, as a b11434 build shows them (no
    --slot-save-path: slot actions answer 501); everything else 404."""

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/props":
            self._send(
                200,
                {
                    "build_info": "b11434-fake",
                    "model_path": "/models/fake.gguf",
                    "total_slots": 1,
                    "default_generation_settings": {"n_ctx": WINDOW},
                },
            )
        elif self.path == "/v1/models":
            card = {"id": "fake.gguf", "object": "model", "owned_by": "llamacpp"}
            self._send(200, {"object": "list", "data": [{**card, "meta": {"n_ctx_train": 32768}}]})
        elif self.path == "/slots":
            self._send(200, [{"id": 0, "n_ctx": WINDOW, "is_processing": False}])
        else:
            self._send(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/slots/"):
            self._send(
                501,
                {"error": {"code": 501, "message": "This server does not support slots action."}},
            )
        else:
            self._send(404, {"error": {"code": 404, "message": "File Not Found"}})

    def log_message(self, format: str, *args: object) -> None:
        return None  # the test's output stays the CLI's


@pytest.fixture
def fake_llama_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeLlamaServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [str(a) for a in args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
    return done


def _package_data() -> set[str]:
    """Every file of the package that is not Python source: what must ship as data."""
    return {
        "sakur4/" + p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }


def test_the_wheel_installs_alone_and_wraps_and_probes_a_fake_server(
    tmp_path: Path, fake_llama_server: str
) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, ROOT)
    (wheel,) = dist.glob("sakur4-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # What the run needs besides code: the dashboard's assets, the parsers' queries,
    # the type marker, any template; the MiniLM embedder's modules (its weights are a
    # package of their own).
    data = _package_data()
    assert {
        "sakur4/gateway/dashboard/static/dashboard.css",
        "sakur4/gateway/dashboard/static/dashboard.js",
        "sakur4/parsers/queries/python-extra.scm",
        "sakur4/py.typed",
    } <= data
    assert data <= names, sorted(data - names)
    assert {
        "sakur4/embedders/minilm/__init__.py",
        "sakur4/embedders/minilm/bert.py",
        "sakur4/embedders/minilm/wordpiece.py",
        "sakur4/cli/wrap.py",
    } <= names
    assert not any(n.startswith(("tests/", "bench/", "scripts/")) for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    _run(py, "-m", "pip", "install", "--quiet", wheel)
    sakur4 = env_dir / "bin" / "sakur4"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAKUR4_", "VIRTUAL_ENV"))}
    env |= {"HOME": str(tmp_path / "home"), "SAKUR4_STORE": str(tmp_path / "store.db")}
    outside = tmp_path / "elsewhere"  # not the checkout: nothing imports from src/
    outside.mkdir()
    where = _run(py, "-c", "import sakur4; print(sakur4.__file__)", cwd=outside, env=env)
    assert where.stdout.startswith(str(env_dir)), where.stdout

    helped = _run(sakur4, "wrap", "--help", cwd=outside, env=env)
    assert "claude" in helped.stdout

    probed = _run(sakur4, "probe", fake_llama_server, "--quick", cwd=outside, env=env)
    assert f"{fake_llama_server}: llama.cpp b11434-fake" in probed.stdout, probed.stdout
    assert f"context window  {WINDOW} tokens" in probed.stdout, probed.stdout
    assert "Traceback" not in probed.stderr
