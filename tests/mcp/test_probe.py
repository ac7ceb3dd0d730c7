"""The ``probe`` tool: the configured backend only, stored results, clear failures."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from sakur4.mcp import build_server
from sakur4.mcp.host import ToolHost
from sakur4.settings import Settings
from sakur4.store import Store

pytestmark = pytest.mark.anyio


def _server(store: Store, project_dir: Path, backend: str | None) -> Any:
    settings = Settings.load(project=project_dir, backend=backend)
    return build_server(ToolHost(settings, store))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_no_backend_configured_is_a_clear_error(
    store: Store, project_dir: Path, results: Any
) -> None:
    async with Client(_server(store, project_dir, None)) as client:
        message = results.error(await client.call_tool("probe", {}))
    assert "no inference server is configured: set SAKUR4_BACKEND" in message


async def test_a_backend_that_is_down_is_named_and_serving_goes_on(
    store: Store, project_dir: Path, results: Any
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    async with Client(_server(store, project_dir, url)) as client:
        message = results.error(await client.call_tool("probe", {"refresh": True}))
        assert f"backend {url}" in message
        assert "Traceback" not in message
        results.data(await client.call_tool("status", {}))


@pytest.mark.backend
async def test_probe_a_real_llama_server_then_read_it_back(
    store: Store, project_dir: Path, results: Any, llama_ring: Any
) -> None:
    async with Client(_server(store, project_dir, llama_ring.url)) as client:
        fresh = results.data(
            await client.call_tool("probe", {"refresh": True, "experiment": False})
        )
        assert fresh["fresh"] is True
        assert fresh["kind"] == "llama.cpp"
        assert fresh["n_ctx"]
        assert fresh["n_ctx"] > 0
        assert fresh["reuse_verifiable"] is True
        assert fresh["checkpoint_source"] == "uncertain"  # no experiment was run
        stored = results.data(await client.call_tool("probe", {}))
    assert stored["fresh"] is False
    assert stored["probed_at"] == fresh["probed_at"]
