"""The head names ``open_fold`` and ``recall`` only where the request offers them
(issue 41: aider, ``--openai`` and ``--no-mcp`` runs were told of tools they did not
have). The scripted stand-in answers; the rendered request is what the server gets."""

from __future__ import annotations

import asyncio
from typing import Any

from sakur4.engine.folds import PREAMBLE, PREAMBLE_WITHOUT_TOOLS
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.pipeline import TurnPipeline
from sakur4.turns.sessions import offers_open_fold
from scripted_server import scripted_pipeline


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def head_of(gw: TurnPipeline, project: Project, tools: list[dict[str, Any]] | None) -> str:
    body: dict[str, Any] = {
        "model": "local",
        "messages": [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": f"Fix it ({len(tools or [])} tools)."},
        ],
    }
    if tools is not None:
        body["tools"] = tools

    async def turn() -> str:
        async with gw.turn(body, project, None) as t:
            _, t.outcome = await gw.sender.chat(t.prepared)
            return str(t.prepared.body["messages"][0]["content"])

    return asyncio.run(turn())


def test_the_fold_tools_are_named_only_where_the_request_offers_them(
    store: Store, project: Project
) -> None:
    gw, _ = scripted_pipeline(store)
    for tools in (None, [], [tool("read"), tool("bash")]):
        head = head_of(gw, project, tools)
        assert PREAMBLE_WITHOUT_TOOLS in head
        assert "open_fold" not in head
        assert "recall" not in head
    # Each harness names Sakur4's MCP tools its own way.
    for name in ("open_fold", "mcp__sakur4__open_fold", "sakur4_open_fold"):
        assert PREAMBLE in head_of(gw, project, [tool("read"), tool(name)])
    anthropic_shape = [{"name": "mcp__sakur4__open_fold", "input_schema": {}}]
    assert offers_open_fold(anthropic_shape)
