"""Headroom's proxy in front of a llama-server, for the ``headroom`` strategy.

Headroom (PyPI ``headroom-ai``, "the context optimization layer") is optional and
lives in a venv of its own under Sakur4's cache directory:

    python -m venv ~/.cache/sakur4/headroom-venv
    ~/.cache/sakur4/headroom-venv/bin/pip install 'headroom-ai[proxy]==0.42.0'

The proxy runs offline (``HEADROOM_OFFLINE=1``), with no response cache, no rate
limit and no session state, in front of the strategy's own server; the bench sends
its chat calls through it and everything else (the token layouts drop-oldest
measures with) straight to the server. Its ML compressor's model cannot be
downloaded here, so what runs is its offline path.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from processes import answering

from sakur4.backends.launcher import free_port

CHAT = "/v1/chat/completions"


def venv(cache_dir: Path) -> Path:
    return cache_dir / "headroom-venv"


def absent(cache_dir: Path) -> str | None:
    """Why the strategy cannot run (None: it can)."""
    exe = venv(cache_dir) / "bin" / "headroom"
    if not exe.is_file():
        return f"Headroom is not installed ({exe} missing; see bench/headroom.py)"
    return None


@contextmanager
def proxy(cache_dir: Path, upstream: str, log: Path, wait_s: float = 180.0) -> Iterator[str]:
    """A Headroom proxy in front of ``upstream``; yields its URL once ``/livez`` answers."""
    port = free_port()
    exe = venv(cache_dir) / "bin" / "headroom"
    args = [str(exe), "proxy", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--openai-api-url", upstream, "--no-cache", "--no-rate-limit", "--stateless"]
    env = {**os.environ, "HEADROOM_OFFLINE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    with answering(proc, log, f"{url}/livez", "headroom proxy", wait_s, 0.5):
        yield url


class ChatVia(httpx.AsyncBaseTransport):
    """Chat calls to ``proxy``, every other call where it was addressed."""

    def __init__(self, proxy: str) -> None:
        self.proxy = httpx.URL(proxy)
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == CHAT:
            request.url = request.url.copy_with(host=self.proxy.host, port=self.proxy.port)
            request.headers["host"] = f"{self.proxy.host}:{self.proxy.port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None  # the probe's client closes it, then others go on using it
