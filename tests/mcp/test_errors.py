"""Bad input and failures reach the client as clear tool errors; the server keeps serving."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

import sakur4.episodes.recall as recall_module
from sakur4.bounds import INT_MAX, INT_MIN, JSON_INT_MAX
from sakur4.mcp.host import ToolHost
from sakur4.mcp.toolserver import ToolServer
from sakur4.store.projects import Project

pytestmark = pytest.mark.anyio

# (tool, arguments, what the error must say)
BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("no_such_tool", {}, "Unknown tool: no_such_tool"),
    ("open_fold", {"episode_id": "seven"}, "episode_id"),
    ("open_fold", {}, "episode_id"),
    ("open_fold", {"episode_id": 99999}, "no episode 99999 in this project"),
    ("remember", {"text": "x" * 200_001}, "at most 200000 characters"),
    ("recall", {"query": "x", "k": 100_000}, "less than or equal to 200"),
    ("status", {"project": "relative/path"}, "must be an absolute path"),
    ("ledger_index", {"path": "../.."}, "outside the project root"),
    ("ledger_index", {"path": "/etc"}, "outside the project root"),
    ("atlas_read", {"path": "/etc/passwd"}, "outside the project root"),
    ("atlas_write", {"path": "a.py", "qualified_name": "nope", "summary": "s"}, "no valid anchor"),
    ("impact", {"name": "nothing_here"}, "no current symbol named 'nothing_here'"),
    ("anchor_unpin", {"anchor_id": 424242}, "no anchor 424242 in this project"),
    # Issue 15, row 14: more than SQLite holds, refused by the argument's own bound.
    ("open_fold", {"episode_id": 10**23}, "less than or equal to 9007199254740991"),
    ("anchor_unpin", {"anchor_id": 10**23}, "less than or equal to 9007199254740991"),
    ("anchor_pin", {"text": "x", "priority": 10**23}, "less than or equal to 1000"),
    # Issue 15, row 19: an unknown argument is refused, named, not ignored.
    ("status", {"bogus": 1}, "bogus\n  Extra inputs are not permitted"),
    ("receipts", {"limt": 5}, "limt\n  Extra inputs are not permitted"),
]


async def test_bad_calls_are_tool_errors_and_serving_goes_on(client: Client, results) -> None:
    async with client:
        for name, args, expected in BAD_CALLS:
            message = results.error(await client.call_tool(name, args))
            assert expected in message, (name, message)
            assert "Traceback" not in message
        assert results.data(await client.call_tool("status", {}))["episodes"] == 0


async def test_every_tool_refuses_an_argument_it_does_not_take(server: ToolServer, results) -> None:
    async with Client(server) as client:
        for tool in (await client.list_tools()).tools:
            assert tool.input_schema["additionalProperties"] is False, tool.name
            message = results.error(await client.call_tool(tool.name, {"no_such_arg": 1}))
            assert "no_such_arg\n  Extra inputs are not permitted" in message, tool.name


def test_each_published_input_schema_is_its_strict_models(server: ToolServer) -> None:
    """ToolServer publishes the SDK's schema plus additionalProperties instead of
    generating the strict model's again (start-up): the two must stay the same."""
    for tool in server._tool_manager.list_tools():
        assert tool.parameters == tool.fn_metadata.arg_model.model_json_schema(by_alias=True)


async def test_every_integer_argument_is_bounded(server: ToolServer) -> None:
    """The same bounds as the CLI's (sakur4.bounds): none past what SQLite holds, nor
    past what a JavaScript harness holds exactly (OpenCode re-sends 2**63 - 1 rounded up,
    and the gateway then refuses the whole request: issue 30)."""
    async with Client(server) as client:
        for tool in (await client.list_tools()).tools:
            for name, prop in tool.input_schema["properties"].items():
                for t in (prop, *prop.get("anyOf", [])):
                    if t.get("type") == "integer":
                        where = f"{tool.name}.{name}"
                        assert INT_MIN <= t["minimum"] <= t["maximum"] <= INT_MAX, where
                        assert -JSON_INT_MAX <= t["minimum"] <= t["maximum"] <= JSON_INT_MAX


async def test_a_symlink_out_of_the_project_is_refused(
    server: ToolServer, results, project: Project, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("def secret():\n    pass\n")
    (project.root / "link").symlink_to(outside)
    async with Client(server) as client:
        message = results.error(await client.call_tool("ledger_index", {"path": "link"}))
        assert "outside the project root" in message
        # Indexing the whole project skips the link too: nothing of it is indexed.
        results.data(await client.call_tool("ledger_index", {}))
        found = results.data(await client.call_tool("ledger_symbol", {"name": "secret"}))
        assert found["symbols"] == []


async def test_an_unexpected_failure_is_generic_to_the_client_and_logged(
    server: ToolServer, results, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> object:  # fault injection
        raise RuntimeError("internal detail /secret/path")

    monkeypatch.setattr(recall_module, "recall", broken)  # the tool imports it per call
    with caplog.at_level(logging.ERROR):
        async with Client(server) as client:
            message = results.error(await client.call_tool("recall", {"query": "x"}))
            assert message == "Error executing tool recall"
            results.data(await client.call_tool("status", {}))
    # The server's log (stderr) keeps the whole story, cause included.
    causes = [r.exc_info[1].__cause__ for r in caplog.records if r.exc_info and r.exc_info[1]]
    assert any("internal detail" in str(c) for c in causes)


async def test_a_store_failure_is_a_clear_tool_error(host: ToolHost, server: ToolServer, results):
    host.store.close()
    async with Client(server) as client:
        message = results.error(await client.call_tool("status", {}))
    assert "store" in message
    assert "closed" in message
