"""A real llama-server with embeddings enabled, for the OpenAI-compatible embedder.

Kept here (not in fixtures_llama.py, which the backends work owns) because it needs
``--embeddings --pooling mean``: Gemma 3 270M is not an embedding model, so the
server must be told how to pool its hidden states into one vector per text.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from conftest import REAL_CACHE_DIR
from sakur4.backends.launcher import ensure_model, find_llama_server
from sakur4.errors import SettingsError
from sakur4.settings import Settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def embedding_server(request: pytest.FixtureRequest) -> Iterator[str]:
    s = Settings.load(cache_dir=REAL_CACHE_DIR)
    try:
        binary, model = find_llama_server(s), ensure_model(s)
    except SettingsError as e:
        if request.config.getoption("--require-backend"):
            pytest.fail(f"real llama-server required: {e}")
        pytest.skip(f"no real llama-server: {e}")
    port = _free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["-c", "4096", "-np", "1", "-t", "2", "--embeddings", "--pooling", "mean"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
                pytest.fail(f"llama-server exited with {proc.returncode}: {err}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama-server did not become ready within 60 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
