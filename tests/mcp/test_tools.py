"""Every tool, called through ``mcp.Client`` in-process, over stdio and over HTTP."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from sakur4.ledger import current_fact
from sakur4.receipts import Receipt, write_receipt
from sakur4.store import Store
from sakur4.store.projects import Project

pytestmark = pytest.mark.anyio

PUBLIC_TOOLS = {
    "ledger_index",
    "ledger_symbol",
    "repo_map",
    "impact",
    "atlas_write",
    "atlas_read",
    "remember",
    "recall",
    "open_fold",
    "anchor_pin",
    "anchor_unpin",
    "anchor_list",
    "status",
    "receipts",
    "probe",
}


def write_sources(root: Path) -> None:
    (root / "app").mkdir()
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "core.py").write_text(
        "def parse(text):\n"
        "    return text.split()\n"
        "\n\n"
        "class Planner:\n"
        "    def cut(self, tokens):\n"
        "        return parse(tokens)\n"
    )
    (root / "app" / "cli.py").write_text(
        "from app.core import Planner\n\n\ndef main():\n    return Planner().cut('a b')\n"
    )


async def test_every_tool_is_described_typed_and_works(
    client: Client, results, store: Store, project: Project, transport: str
) -> None:
    write_sources(project.root)
    write_receipt(
        store,
        Receipt(
            project_id=project.id,
            session="s1",
            turn=3,
            context_window=32768,
            prompt_tokens=12446,
            profile="cache-first",
            profile_reason="checkpoint ring detected",
            verdict="fits",
            cache_verdict="unverifiable",
        ),
    )
    called: set[str] = set()

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        called.add(name)
        out = results.data(await client.call_tool(name, args))
        assert out["project"]["root"] == str(project.root)
        return out

    async with client:
        listed = (await client.list_tools()).tools
        assert {t.name for t in listed} == PUBLIC_TOOLS
        for tool in listed:
            assert len(tool.description or "") > 40, tool.name
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None, f"{tool.name} has no structured output"
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is not None
            if tool.name != "probe":  # the probe is of the server, not of a project
                assert "project" in tool.input_schema["properties"], tool.name

        # The Ledger: index, look up, map, impact.
        indexed = await call("ledger_index", {})
        assert indexed["files_parsed"] == 3
        assert indexed["facts_written"] >= 3

        (sym,) = (await call("ledger_symbol", {"name": "parse"}))["symbols"]
        parse = sym["current"]
        assert (parse["path"], parse["kind"]) == ("app/core.py", "function")
        assert parse["start_line"] == 1
        # One record: the tool publishes the Ledger's fact as `sakur4 symbol --json` prints it.
        assert parse == current_fact(store, project.id, "app/core.py", "app.core.parse").as_dict()

        m = await call("repo_map", {"budget_tokens": 400})
        assert "app/core.py" in m["text"]
        assert 0 < m["tokens"] <= 400

        hit = await call("impact", {"name": "parse", "depth": 2})
        assert {e["qualified_name"] for e in hit["entries"] if e["depth"] == 1} == {
            "app.core.Planner.cut"
        }

        # The Atlas: anchored to the fact, then stale once the code changes.
        written = await call(
            "atlas_write",
            {
                "path": parse["path"],
                "qualified_name": parse["qualified_name"],
                "summary": "splits text on whitespace",
            },
        )
        assert written["anchor_hash"] == parse["symbol_hash"]
        (entry,) = (await call("atlas_read", {"path": "app/core.py"}))["entries"]
        assert (entry["status"], entry["text"]) == ("current", "splits text on whitespace")

        core = project.root / "app" / "core.py"
        core.write_text(core.read_text().replace("text.split()", "text.split(',')"))
        assert (await call("ledger_index", {"path": "app"}))["files_parsed"] == 1
        (entry,) = (await call("atlas_read", {"qualified_name": parse["qualified_name"]}))[
            "entries"
        ]
        assert entry["text"] == "[STALE] splits text on whitespace"
        assert entry["current_signature"].startswith("def parse(text)")

        # Episodic memory.
        note = await call("remember", {"text": "the cut is chosen in the planner"})
        found = await call("recall", {"query": "planner cut"})
        assert found["mode"] == "lexical"
        assert [h["episode"]["id"] for h in found["hits"]] == [note["episode_id"]]
        fold = await call("open_fold", {"episode_id": note["episode_id"]})
        assert fold["episode"]["content"] == "the cut is chosen in the planner"

        # Anchors.
        pinned = (await call("anchor_pin", {"text": "never edit generated files", "priority": 5}))[
            "anchor"
        ]
        listed = (await call("anchor_list", {}))["anchors"]
        assert [a["id"] for a in listed] == [pinned["id"]]
        unpinned = (await call("anchor_unpin", {"anchor_id": pinned["id"]}))["anchor"]
        assert unpinned["unpinned_at"] is not None
        assert (await call("anchor_list", {}))["anchors"] == []

        # Operations.
        status = await call("status", {})
        assert (status["files"], status["episodes"], status["anchors"]) == (3, 1, 0)
        assert (status["atlas_entries"], status["receipts"]) == (1, 1)
        (receipt,) = (await call("receipts", {"session": "s1"}))["receipts"]
        assert "12,446 of 32,768 tokens" in receipt["summary"]
        assert receipt["reprefilled"] == 12446  # unverifiable counts as a full re-prefill

        # No backend is configured here (tests/mcp/test_probe.py has a real one).
        called.add("probe")
        message = results.error(await client.call_tool("probe", {}))
        assert "no inference server is configured" in message

    assert called == PUBLIC_TOOLS, PUBLIC_TOOLS - called


async def test_a_long_index_does_not_hold_up_other_calls(
    server: Any, results: Any, project: Project
) -> None:
    """Tools run on worker threads: the event loop keeps serving while the parser works."""
    body = "\n".join(f"def f{j}(x):\n    return g{j}(x)\n" for j in range(30))
    for i in range(300):
        (project.root / f"m{i}.py").write_text(body)
    finished: list[str] = []
    async with Client(server) as client:

        async def index() -> None:
            results.data(await client.call_tool("ledger_index", {}))
            finished.append("ledger_index")

        async def status() -> None:
            results.data(await client.call_tool("status", {}))
            finished.append("status")

        async with anyio.create_task_group() as tg:
            tg.start_soon(index)
            tg.start_soon(status)
    assert finished == ["status", "ledger_index"]


async def test_atlas_takes_ledger_names_and_sees_edits_without_an_index(
    client: Client, results: Any, project: Project
) -> None:
    """Issue 15, rows 17 and 13, through the SDK client on each transport."""
    shapes = project.root / "shapes.py"
    shapes.write_text("class Circle:\n    def area(self):\n        return 3.14 * self.r**2\n")
    async with client:
        results.data(await client.call_tool("ledger_index", {}))
        (found,) = results.data(await client.call_tool("ledger_symbol", {"name": "Circle.area"}))[
            "symbols"
        ]
        args = {"path": "shapes.py", "qualified_name": "Circle.area", "summary": "pi r squared"}
        written = results.data(await client.call_tool("atlas_write", args))
        assert written["qualified_name"] == found["current"]["qualified_name"]
        assert written["fact_id"] == found["current"]["id"]

        text = shapes.read_text().replace("3.14", "3.14159")
        shapes.write_text(text)
        st = shapes.stat()  # the size moved anyway; the mtime too, whatever the clock's tick
        os.utime(shapes, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
        (entry,) = results.data(await client.call_tool("atlas_read", {"path": "shapes.py"}))[
            "entries"
        ]
        assert entry["text"] == "[STALE] pi r squared"
        shapes.unlink()
        read = await client.call_tool("atlas_read", {"qualified_name": "Circle.area"})
        (entry,) = results.data(read)["entries"]
        assert entry["label"] == "[STALE: removed]"
