"""A refused turn leaves nothing behind that the next turn reads (issue 41).

A refused turn deletes the episodes it recorded, and SQLite gives the next row stored
the highest id plus one: the refused turn's ids come back for the next turn's new
messages. The session's cache of stored episodes held the deleted ones under those
ids, so the next turn planned and sent the refused turn's text in place of its own: a
follow-up was refused at the refused turn's size, turn after turn, and a compaction
request sent the refused turn's answer instead of the summariser's instruction. The
scripted server (one token per character) stands in for llama-server here; the real
server replays the Claude Code session in tests/gateway/test_stuck_session.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from replayed import replay
from sakur4.demo.scenario import build_session
from sakur4.episodes.stream import fetch_episodes, session_episodes
from sakur4.errors import PromptTooLong
from sakur4.gateway.translate import to_chat
from sakur4.harnesses.claude_code import COMPACTION_TASK as CLAUDE_CODE_TASK
from sakur4.receipts import Receipt
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.pipeline import TurnPipeline
from sakur4.vocabulary import Tier
from scripted_server import scripted_pipeline

SYSTEM = {"role": "system", "content": "You are opencode, a careful coding agent. " * 20}
ASKED = {"role": "user", "content": "Read the planner and explain where the cut is chosen."}
ANSWER = {"role": "assistant", "content": "The planner chooses the cut at a resume point. " * 4}
PASTE = "x = compute(x)  # a line of a file pasted whole\n" * 500  # ~24k tokens here


async def _turn(gw: TurnPipeline, project: Project, messages: list[dict[str, Any]]) -> Receipt:
    async with gw.turn({"model": "m", "messages": messages}, project, None) as t:
        _, t.outcome = await gw.sender.chat(t.prepared)
    return t.receipt


def _served(gw: TurnPipeline, project: Project, messages: list[dict[str, Any]]) -> Receipt:
    return asyncio.run(_turn(gw, project, messages))


def _refused(gw: TurnPipeline, project: Project, messages: list[dict[str, Any]]) -> None:
    with pytest.raises(PromptTooLong):
        asyncio.run(_turn(gw, project, messages))


def test_a_follow_up_after_a_refused_turn_is_served_with_its_own_words(
    store: Store, project: Project
) -> None:
    gw, server = scripted_pipeline(store)
    _served(gw, project, [SYSTEM, ASKED])
    _refused(gw, project, [SYSTEM, ASKED, ANSWER, {"role": "user", "content": PASTE}])
    instead = {"role": "user", "content": "Never mind the file: which module holds the cut?"}
    receipt = _served(gw, project, [SYSTEM, ASKED, ANSWER, instead])
    # Before the fix: refused again at the refused turn's size (the paste sent instead).
    sent = json.dumps(server.sent[-1]["messages"])
    assert instead["content"] in sent
    assert "pasted whole" not in sent
    assert receipt.prompt_tokens < 2000


def test_a_compaction_after_a_refused_turn_sends_its_instruction(
    store: Store, project: Project
) -> None:
    gw, server = scripted_pipeline(store)
    _served(gw, project, [SYSTEM, ASKED])
    attached = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare it with @src/big.py please"},
            {"type": "text", "text": "<file>\n" + PASTE + "</file>"},
        ],
    }
    _refused(gw, project, [SYSTEM, ASKED, ANSWER, attached])
    # OpenCode's compaction: served as the session's next turn, from its cached prompt.
    conversation = f"[User]: {ASKED['content']}\n\n[Assistant]: {ANSWER['content']}"
    compact = [
        {"role": "system", "content": "You are a context summarization agent."},
        {
            "role": "user",
            "content": "Here is the conversation so far:\n\n<conversation>\n"
            f"{conversation}\n</conversation>\n\nCreate a new anchored summary.",
        },
    ]
    _served(gw, project, compact)
    last = server.sent[-1]["messages"][-1]
    # Before the fix: the refused turn's answer was sent in the instruction's place.
    assert last["role"] == "user"
    assert "Create a new anchored summary." in last["content"]


# -- Claude Code's @-attached files (issue 41) ----------------------------------------

FIXTURE = Path(__file__).parents[1] / "fixtures" / "harnesses" / "claude_code_p_continue.json"
BIG = "\n".join(f"{n}\tdef greet_{n}(name):  return f'hello {{name}}'" for n in range(700))


def claude_code_turn(extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Claude Code's recorded ``@alpha.py`` turn (its fifth request), the attached file
    grown past the window, as the gateway converts it; ``extra``: text blocks Claude
    Code adds to that user message on a later request (a ``--continue`` prompt, its
    compaction's instruction)."""
    body = json.loads(FIXTURE.read_text(encoding="utf-8"))["requests"][5]
    blocks = body["messages"][-1]["content"]
    for b in blocks:
        if b.get("type") == "text" and "Result of calling the Read tool" in b["text"]:
            b["text"] = (
                f"<system-reminder>\nResult of calling the Read tool:\n{BIG}\n</system-reminder>\n"
            )
    blocks.extend({"type": "text", "text": t} for t in extra)
    return to_chat(body)


async def _chat(gw: TurnPipeline, project: Project, body: dict[str, Any]) -> Receipt:
    async with gw.turn(body, project, "claude-code-session") as t:
        _, t.outcome = await gw.sender.chat(t.prepared)
    return t.receipt


def test_claude_codes_oversized_attachments_fold_and_its_session_goes_on(
    store: Store, project: Project
) -> None:
    gw, server = scripted_pipeline(store, n_ctx=24_576)  # the file alone is ~30k here
    words = "Look at @alpha.py again: is it longer than beta.py?"
    asked = claude_code_turn()
    # Before: refused ("prompt is too long: 47,… tokens > 24576 maximum"), then every
    # turn after it that carried the file, compaction included.
    first = asyncio.run(_chat(gw, project, asked))
    assert first.verdict != "refused"
    sent = server.sent[-1]["messages"][-1]["content"]
    assert words in sent
    assert "open_fold(" in sent
    assert "greet_650" not in sent
    assert any(s["from"] == "live" and s["to"] == "masked" for s in first.steps)
    compact = claude_code_turn(("CRITICAL: Respond with TEXT ONLY. " + CLAUDE_CODE_TASK,))
    assert asyncio.run(_chat(gw, project, compact)).verdict != "refused"
    assert CLAUDE_CODE_TASK in server.sent[-1]["messages"][-1]["content"]
    follow = claude_code_turn(("Which of the two modules is longer?",))
    assert asyncio.run(_chat(gw, project, follow)).verdict != "refused"
    assert "Which of the two modules is longer?" in server.sent[-1]["messages"][-1]["content"]


def test_every_step_names_a_stored_episode_of_its_size(store: Store, project: Project) -> None:
    # The scripted coding agent (tool calls, long results crossing the trigger) with a
    # refused turn in its middle. Before: the next turn's steps gave the refused turn's
    # episodes' sizes under other messages' ids (OpenCode's "4,810 vs 6"), and a step
    # from Live the cached span's size (its template tokens with it).
    gw, _ = scripted_pipeline(store, n_ctx=12_000)
    calls = replay(build_session(turns=8, file_chars=2600))
    refused_at = len(calls) // 2
    receipts = []
    for n, request in enumerate(calls):
        if n == refused_at:
            # A paste past the window after the last call served; the session then
            # goes on with other messages in its place.
            pasted = [*calls[n - 1].messages, {"role": "user", "content": PASTE}]
            _refused(gw, project, pasted)
        receipts.append(_served(gw, project, list(request.messages)))
    steps = [s for r in receipts for s in r.steps]
    stored = fetch_episodes(store, project.id, sorted({s["episode"] for s in steps}))
    assert sum(1 for s in steps if (s["from"], s["to"]) == ("live", "masked")) >= 3
    for s in steps:
        episode = stored[s["episode"]]
        assert s["tokens"] == episode.tokens, (s, episode)
        if s["from"] == "live" and not s.get("piece"):
            assert s["tokens_before"] == episode.tokens, (s, episode)


def test_an_instruction_after_a_refused_turn_is_never_stored_folded(
    store: Store, project: Project
) -> None:
    # OpenCode's system prompt was stored as a stub after a refused turn (issue 41). A
    # turn refused for an unread tool result past the window; the next request's new
    # messages took its ids, one of them the harness's instruction. Before the fix the
    # plan saw the refused result under that id, folded it (it was answered now), and
    # the store wrote "masked" on the instruction's row.
    gw, server = scripted_pipeline(store)
    _served(gw, project, [SYSTEM, ASKED])
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
    }
    _refused(
        gw, project, [SYSTEM, ASKED, call, {"role": "tool", "tool_call_id": "c1", "content": PASTE}]
    )
    told = {"role": "system", "content": "The file is too large: read it in parts of 200 lines."}
    goes_on = [
        SYSTEM,
        ASKED,
        {"role": "assistant", "content": "I could not read it whole."},
        told,
        {"role": "assistant", "content": "I will read it in parts."},
        {"role": "user", "content": "Read the first part."},
    ]
    _served(gw, project, goes_on)
    assert told["content"] in json.dumps(server.sent[-1]["messages"])
    stored = session_episodes(store, project.id, gw.sessions.last_requests(project.id)[0][0])
    instruction = next(e for e in stored if e.content == told["content"])
    assert instruction.tier is Tier.LIVE  # before: masked
    for e in stored:  # nothing here needed folding
        assert e.tier is Tier.LIVE, (e.id, e.role, e.content[:40], e.tier)
