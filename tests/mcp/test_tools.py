"""Every tool, called through ``mcp.Client`` in-process, over stdio and over HTTP."""

from __future__ import annotations

import pytest
from mcp import Client

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


async def test_tools_are_described_typed_and_structured(client: Client) -> None:
    async with client:
        listed = (await client.list_tools()).tools
    names = {t.name for t in listed}
    assert names <= PUBLIC_TOOLS, names - PUBLIC_TOOLS
    for tool in listed:
        assert len(tool.description or "") > 40, tool.name
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None, f"{tool.name} has no structured output"
        props = tool.input_schema.get("properties", {})
        assert "project" in props, f"{tool.name} cannot be pointed at a project"
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is not None


async def test_memory_tools(client: Client, results, store: Store, project: Project) -> None:
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
    async with client:
        note = results.data(
            await client.call_tool("remember", {"text": "the cut is chosen in the planner"})
        )
        assert note["project"]["root"] == str(project.root)
        eid = note["episode_id"]

        found = results.data(await client.call_tool("recall", {"query": "planner cut"}))
        assert found["mode"] == "lexical"
        assert [h["episode"]["id"] for h in found["hits"]] == [eid]
        assert found["hits"][0]["lexical_rank"] == 1

        fold = results.data(await client.call_tool("open_fold", {"episode_id": eid}))
        assert fold["episode"]["content"] == "the cut is chosen in the planner"
        assert fold["episode"]["kind"] == "note"

        status = results.data(await client.call_tool("status", {}))
        assert status["episodes"] == 1
        assert status["receipts"] == 1

        got = results.data(await client.call_tool("receipts", {"session": "s1"}))
        (receipt,) = got["receipts"]
        assert receipt["context_window"] == 32768
        assert "12,446 of 32,768 tokens" in receipt["summary"]
        assert receipt["reprefilled"] == 12446  # unverifiable is counted as a full re-prefill
