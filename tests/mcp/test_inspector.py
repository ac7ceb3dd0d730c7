"""A real third-party client: the MCP Inspector's CLI mode against ``sakur4 serve``.

The Inspector is pinned in tests/mcp/inspector/package.json (0.15.0: the newest
release whose declared engines accept the Node 20 this machine has) and installed
with ``npm ci --prefix tests/mcp/inspector``. Skipped only when Node is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sakur4.store.projects import Project

HERE = Path(__file__).parent / "inspector"
INSPECTOR = HERE / "node_modules" / ".bin" / "mcp-inspector"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npx") is None,
    reason="node/npx not installed: the MCP Inspector cannot run",
)


def inspect(env: dict[str, str], *args: str) -> dict[str, Any]:
    """Run one Inspector CLI request against a fresh ``sakur4 serve`` and return its JSON."""
    server_env = [f"{k}={env[k]}" for k in ("SAKUR4_STORE", "SAKUR4_PROJECT")]
    done = subprocess.run(
        [
            str(INSPECTOR),
            "--cli",
            *(x for kv in server_env for x in ("-e", kv)),
            sys.executable,
            "-m",
            "sakur4",
            "serve",
            *args,
        ],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return dict(json.loads(done.stdout))


def test_the_inspector_lists_the_tools_and_calls_two(
    serve_env: dict[str, str], project: Project
) -> None:
    if not INSPECTOR.exists():
        pytest.fail(f"the MCP Inspector is not installed: run `npm ci --prefix {HERE}`")
    listed = inspect(serve_env, "--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}
    assert {"remember", "recall", "status", "ledger_index", "anchor_pin"} <= names
    for tool in listed["tools"]:
        assert tool["description"]
        assert tool["inputSchema"]["type"] == "object"

    note = inspect(
        serve_env,
        "--method",
        "tools/call",
        "--tool-name",
        "remember",
        "--tool-arg",
        "text=seen through the inspector",
    )
    assert note["isError"] is False
    eid = note["structuredContent"]["episode_id"]

    found = inspect(
        serve_env,
        "--method",
        "tools/call",
        "--tool-name",
        "recall",
        "--tool-arg",
        "query=inspector",
    )
    assert found["isError"] is False
    assert [h["episode"]["id"] for h in found["structuredContent"]["hits"]] == [eid]
    assert found["structuredContent"]["project"]["root"] == str(project.root)
