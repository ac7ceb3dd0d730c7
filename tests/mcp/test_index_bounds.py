"""An index is of a project, bounded, and the server answers while it runs (issue 15, row 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from sakur4.mcp import build_server
from sakur4.mcp.host import ToolHost
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.projects import Project

pytestmark = pytest.mark.anyio


async def test_a_system_directory_or_home_is_no_project(
    stdio_params: StdioServerParameters, results: Any, store: Store
) -> None:
    """`ledger_index {"project": "/"}` indexed the whole disk: 23,433 files, 83 s."""
    async with Client(stdio_params) as client:
        for root, why in (
            ("/", "it is the root of the file system"),
            ("/usr", "it is a system directory"),
            (str(Path.home()), "it is the home directory"),
        ):
            message = results.error(await client.call_tool("ledger_index", {"project": root}))
            assert f"refusing to use {root} as a project root: {why}" in message
            assert "sakur4 project add" in message
    roots = {r[0] for r in store.query("SELECT root FROM project")}
    assert not roots & {"/", "/usr", str(Path.home())}
    assert store.query("SELECT count(*) FROM repo_file")[0][0] == 0


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        ({"max_index_files": 5}, "more than 5 source files"),
        ({"max_index_bytes": 100}, "more than 100 bytes of source files"),
    ],
)
async def test_an_index_past_its_bounds_is_refused_and_writes_nothing(
    store: Store, store_path: Path, project: Project, results: Any, limit: dict[str, int], says: str
) -> None:
    for i in range(8):
        (project.root / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    settings = Settings.load(store=store_path, project=project.root, **limit)
    async with Client(build_server(ToolHost(settings, store))) as client:
        message = results.error(await client.call_tool("ledger_index", {}))
        assert f"refusing to index {project.root}: it holds {says}" in message
        assert "SAKUR4_MAX_INDEX_FILES" in message
        assert results.data(await client.call_tool("status", {}))["files"] == 0
        # A directory inside it is within the bound.
        (project.root / "pkg").mkdir()
        (project.root / "pkg" / "a.py").write_text("def a():\n    pass\n")
        assert (
            results.data(await client.call_tool("ledger_index", {"path": "pkg"}))["files_parsed"]
            == 1
        )


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
# send_ping warns that the 2026 era has no ping, whatever the mode: legacy is asked for here.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_pings_and_tool_lists_are_answered_while_an_index_runs(
    stdio_params: StdioServerParameters, results: Any, project: Project, mode: str
) -> None:
    """Over stdio the turnstile held every request behind a running index, pings too.
    (Tool calls keep arrival order: a later call still waits for the index.)"""
    body = "\n".join(f"def f{j}(x):\n    return g{j}(x)\n" for j in range(30))
    for i in range(300):
        (project.root / f"m{i}.py").write_text(body)
    finished: list[str] = []
    async with Client(stdio_params, mode=mode) as client:
        started = anyio.Event()

        async def index() -> None:
            started.set()
            results.data(await client.call_tool("ledger_index", {}))
            finished.append("ledger_index")

        async def others() -> None:
            await started.wait()
            await anyio.sleep(0.2)  # the index request goes out first
            if mode == "legacy":  # the 2026-07-28 era has no ping
                await client.send_ping()
                finished.append("ping")
            assert len((await client.list_tools()).tools) == 15
            finished.append("tools/list")

        async with anyio.create_task_group() as tg:
            tg.start_soon(index)
            tg.start_soon(others)
    pinged = ["ping"] if mode == "legacy" else []
    assert finished == [*pinged, "tools/list", "ledger_index"]
