"""A receipt's divergence: where the prompt first differs from the session's cached one,
and, where it is empty, whether that means "extends it" or "nothing to compare with"
(issue 41: every receipt of a fresh gateway's run showed it empty). Scripted stand-in."""

from __future__ import annotations

import asyncio
from typing import Any

from sakur4.gateway.dashboard import pages, view
from sakur4.receipts import list_receipts
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.pipeline import TurnPipeline
from scripted_server import scripted_pipeline


def ask(gw: TurnPipeline, project: Project, messages: list[dict[str, Any]]) -> None:
    async def turn() -> None:
        async with gw.turn({"model": "local", "messages": messages}, project, "s") as t:
            _, t.outcome = await gw.sender.chat(t.prepared)

    asyncio.run(turn())


def test_an_empty_divergence_says_whether_anything_was_compared(
    store: Store, project: Project
) -> None:
    gw, _ = scripted_pipeline(store)
    first: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the parser."},
    ]
    ask(gw, project, first)
    grown = [*first, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Ok."}]
    ask(gw, project, grown)
    edited = [grown[0], {"role": "user", "content": "Fix the lexer."}, *grown[2:]]
    ask(gw, project, edited)
    cold, extends, differs = list_receipts(store, project.id, session="s")
    assert (cold.divergence, cold.detail["compared"]) == (None, False)
    assert (extends.divergence, extends.detail["compared"]) == (None, True)
    assert differs.divergence is not None
    assert differs.divergence > 0
    page = pages.session_page(view.session(store, project, "s"), "/a")
    assert page.count("nothing cached to compare with") == 1
    assert page.count("the prompt extends the one cached") == 1
    assert f"first differs from the cached one at token {differs.divergence:,}" in page
