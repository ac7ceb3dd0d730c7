"""Two projects in one store: no tool returns the other's data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from sakur4.receipts import Receipt, write_receipt
from sakur4.store import Store
from sakur4.store.projects import Project, add_project

pytestmark = pytest.mark.anyio

SECRET = "zebrafinch"  # appears only in project B


@pytest.fixture(params=["inprocess", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def other(store: Store, tmp_path: Path) -> Project:
    root = tmp_path / "other"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(f"def {SECRET}():\n    return 1\n\n\n{SECRET}()\n")
    return add_project(store, root)  # registered: HTTP callers may only name known roots


async def test_no_tool_crosses_projects(
    client: Client, results: Any, store: Store, project: Project, other: Project
) -> None:
    (project.root / "a.py").write_text("def alpha():\n    return 2\n")
    write_receipt(
        store,
        Receipt(
            project_id=other.id,
            session=SECRET,
            turn=1,
            context_window=4096,
            prompt_tokens=100,
            profile="balanced",
            profile_reason="test",
            verdict="fits",
            cache_verdict="reused",
        ),
    )
    b = {"project": str(other.root)}
    async with client:

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            return results.data(await client.call_tool(name, args))

        # Fill project B through the tools.
        await call("ledger_index", b)
        (sym,) = (await call("ledger_symbol", {"name": SECRET, **b}))["symbols"]
        await call(
            "atlas_write",
            {
                "path": "pkg/mod.py",
                "qualified_name": sym["current"]["qualified_name"],
                "summary": f"{SECRET} summary",
                **b,
            },
        )
        b_note = await call("remember", {"text": f"{SECRET} note", "session": SECRET, **b})
        b_anchor = (await call("anchor_pin", {"text": f"{SECRET} rule", **b}))["anchor"]
        assert (await call("status", b))["episodes"] == 1

        # Project A (the server's own, no argument) sees none of it.
        await call("ledger_index", {})
        seen_by_a = [
            await call("status", {}),
            await call("ledger_symbol", {"name": SECRET}),
            await call("repo_map", {"budget_tokens": 2000, "focus": [SECRET]}),
            await call("atlas_read", {}),
            await call("recall", {"query": SECRET}),
            await call("recall", {"query": SECRET, "session": SECRET}),
            await call("anchor_list", {"include_unpinned": True}),
            await call("anchor_list", {"session": SECRET}),
            await call("receipts", {}),
            await call("receipts", {"session": SECRET}),
        ]
        b_marks = [
            f"{SECRET} summary",
            f"{SECRET} note",
            f"{SECRET} rule",
            "pkg/mod.py",
            f"def {SECRET}",
            str(other.root),
        ]
        rows = store.query("SELECT id, project_id, session, content FROM episodic_stream")
        stored = [tuple(r) for r in rows]  # shown if the check below fails
        for out in seen_by_a:
            assert out["project"]["root"] == str(project.root)
            text = json.dumps(out)
            assert not [m for m in b_marks if m in text], (json.dumps(out, indent=1), stored)
        repo_map = seen_by_a.pop(2)
        assert {e["path"] for e in repo_map["entries"]} == {"a.py"}
        empty = {"symbols", "entries", "hits", "anchors", "receipts"}
        for out in seen_by_a[1:]:
            assert all(out[k] == [] for k in empty & out.keys()), out
        status = seen_by_a[0]
        assert (status["episodes"], status["anchors"], status["receipts"]) == (0, 0, 0)
        assert status["atlas_entries"] == 0

        # B's ids do not open anything from A.
        missing = [
            ("open_fold", {"episode_id": b_note["episode_id"]}),
            ("anchor_unpin", {"anchor_id": b_anchor["id"]}),
            ("impact", {"name": SECRET}),
        ]
        for name, args in missing:
            assert "no " in results.error(await client.call_tool(name, args))

        # And B still has all of it.
        assert (await call("open_fold", {"episode_id": b_note["episode_id"], **b}))["episode"]
        assert len((await call("anchor_list", b))["anchors"]) == 1
        assert len((await call("receipts", b))["receipts"]) == 1
