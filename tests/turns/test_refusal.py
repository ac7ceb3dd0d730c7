"""A turn that cannot fit: one short refusal that says what did not fit and what to do,
in the words the harnesses read as an overflow, and the same figure in its receipt and
its message (issue 41: the text repeated itself, gave no advice, and the table and the
message gave two token counts for one turn). The scripted stand-in answers."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from typing import Any

import pytest

from sakur4.errors import PromptTooLong
from sakur4.gateway.dashboard import pages, view
from sakur4.receipts import list_receipts, receipt_row, receipt_sessions
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.pipeline import TurnPipeline
from scripted_server import scripted_pipeline


def ask(gw: TurnPipeline, project: Project, messages: list[dict[str, Any]]) -> None:
    async def turn() -> None:
        async with gw.turn({"model": "local", "messages": messages}, project, "s") as t:
            _, t.outcome = await gw.sender.chat(t.prepared)

    asyncio.run(turn())


SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 30}


def test_a_refusal_says_once_what_did_not_fit_and_what_to_do(
    store: Store, project: Project
) -> None:
    gw, _ = scripted_pipeline(store, n_ctx=4096)
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    read: list[dict[str, Any]] = [
        SYSTEM,
        {"role": "user", "content": "Read the planner."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "def plan(x):\n    pass\n" * 90},
    ]
    ask(gw, project, read[:2])
    ask(gw, project, read)
    attached = "def step(x):\n    return x + 1\n" * 200
    with pytest.raises(PromptTooLong) as refused:
        ask(
            gw,
            project,
            [
                *read,
                {"role": "assistant", "content": "Which part of it?"},
                {"role": "user", "content": "This file:\n" + attached},
            ],
        )
    said = str(refused.value)
    # The words Claude Code and OpenCode read as an overflow (and compact on).
    found = re.match(r"prompt is too long: (\d+) tokens > 4096 maximum: it exceeds", said)
    assert found, said
    assert "exceeds the context window" in said
    # What did not fit, in figures, then the advice: each said once.
    assert "this turn's messages are ~" in said
    assert "the system prompts ~" in said
    assert "/compact" in said
    assert "-c" in said
    assert said.count("window") == 2, said  # the context window, a larger window
    assert len(said) < 400, said
    # The receipt gives the message's figure.
    last = list_receipts(store, project.id, session="s")[-1]
    assert last.verdict == "refused"
    assert last.prompt_tokens == int(found.group(1))
    # The old file read folded, and still the turn did not fit: the figure is what the
    # prompt came to after that, not the prompt before it.
    assert last.detail["planned_prompt_tokens"] > last.prompt_tokens


def test_prompts_are_counted_apart_from_the_agents_requests(store: Store, project: Project) -> None:
    gw, _ = scripted_pipeline(store)
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    conversation: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Fix it."}]
    ask(gw, project, conversation)  # a prompt
    conversation += [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "the file"},
    ]
    ask(gw, project, conversation)  # the agent's loop goes on: a request, no prompt
    conversation += [
        {"role": "assistant", "content": "Fixed."},
        {"role": "user", "content": "Thanks."},
        {"role": "system", "content": "A reminder after the user's message."},
    ]
    ask(gw, project, conversation)  # a prompt, a reminder after it
    (summary,) = receipt_sessions(store, project.id)
    assert (summary.receipts, summary.prompts) == (3, 2)
    # The screens name both, each for what it counts.
    index = pages.index_page(view.projects(store))
    assert '<th scope="col">prompts</th><th scope="col">requests</th>' in index
    assert "<td>2</td><td>3</td>" in index
    page = pages.session_page(view.session(store, project, "s"), "/a")
    assert '<dt>prompts</dt><dd><span class="figure" data-figure="prompts">2</span>' in page
    assert '<dt>requests</dt><dd><span class="figure" data-figure="turns">3</span>' in page


def test_reuse_says_of_how_many_prompt_tokens(store: Store, project: Project) -> None:
    """A turn that reused 9 tokens is not shown as "reused 9/3,489" beside "reused"."""
    gw, _ = scripted_pipeline(store)
    ask(gw, project, [SYSTEM, {"role": "user", "content": "Fix it."}])
    (stored,) = list_receipts(store, project.id, session="s")
    r = replace(stored, server_cached=9, server_processed=3489)
    assert r.summary().endswith(", reused 9 of 3,498 prompt tokens"), r.summary()
    assert receipt_row(r)["reused of prompt"] == "9 of 3,498"
