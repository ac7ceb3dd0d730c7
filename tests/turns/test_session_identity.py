"""Which session a request belongs to, when it names none: distinct conversations stay
distinct (aider chats of one project, OpenCode's title requests, clients that open
alike), while one conversation's turns and its own summary calls stay in one (issue 41).

The requests are the recorded and source-built harness shapes in tests/fixtures; the
book is the gateway's own (:class:`SessionBook`), told after each request what the
session last sent, as the pipeline tells it once a turn is answered.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sakur4.gateway.anthropic import session_header
from sakur4.gateway.translate import to_chat
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.churn import without_billing_header
from sakur4.turns.sessions import (
    SessionBook,
    derive_session,
    parent_of,
)
from sakur4.turns.validate import chat_messages
from scripted_server import scripted_pipeline

FIXTURES = Path(__file__).parent.parent / "fixtures"
Messages = list[dict[str, Any]]


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data


class Gateway:
    """The session book as the pipeline drives it: named, then answered (or not)."""

    def __init__(self) -> None:
        self.book = SessionBook("")

    def send(
        self,
        messages: Messages,
        header: str | None = None,
        tools: Any = None,
        answered: bool = True,
    ) -> str:
        name = self.book.session_of(1, messages, header, tools)
        state = self.book.state(1, name, 1)
        state.harness = list(messages)
        state.failed = None if answered else object()  # type: ignore[assignment]
        return name


def aider_turns() -> list[Messages]:
    return [r["body"]["messages"] for r in fixture("harness/aider-calls.json")["requests"]]


def another_aider_chat(question: str) -> Messages:
    """aider started again in the same project: the same system prompt (another
    clock), examples, repo map and files; another question."""
    first = copy.deepcopy(aider_turns()[0])
    first[0]["content"] = first[0]["content"].replace("14:05:33", "15:41:02")
    first[-1]["content"] = question + first[-1]["content"][first[-1]["content"].index("\n\n#") :]
    return first


def test_every_aider_call_of_one_chat_is_one_session_and_a_new_chat_is_another() -> None:
    gw = Gateway()
    names = [gw.send(m) for m in aider_turns()]  # four turns and the history summary
    assert len(set(names)) == 1, names
    new_chat = gw.send(another_aider_chat("Rename masked_stub to stub."))
    assert new_chat != names[0]
    assert new_chat.startswith(names[0] + "-")  # the opening's next conversation
    # The first chat goes on in its own session, the new one in its own.
    later = [*aider_turns()[-1], {"role": "assistant", "content": "Yes: 8,192 renderings."}]
    assert gw.send([*later, {"role": "user", "content": "Thanks."}]) == names[0]
    second = another_aider_chat("Rename masked_stub to stub.")
    second[-1]["content"] = "Rename masked_stub to stub."
    second += [
        {"role": "assistant", "content": "I renamed it in folds.py and its two callers."},
        {"role": "user", "content": "Run the tests."},
    ]
    assert gw.send(second) == new_chat


def test_a_retry_of_an_unanswered_turn_stays_in_its_session() -> None:
    gw = Gateway()
    first = gw.send(aider_turns()[0], answered=False)
    again = copy.deepcopy(aider_turns()[0])
    again[0]["content"] = again[0]["content"].replace("14:05:33", "14:05:59")
    assert gw.send(again) == first


OPENCODE_TITLE_SYSTEM = (
    "You are a title generator. You output ONLY a thread title. Nothing else.\n"
    "Generate a brief title that would help the user find this conversation later."
)


def opencode_title(first_message: dict[str, Any]) -> Messages:
    """OpenCode's title request (session/prompt.ts ensureTitle): its own system prompt,
    "Generate a title for this conversation:", then the conversation's first message."""
    return [
        {"role": "system", "content": OPENCODE_TITLE_SYSTEM},
        {"role": "user", "content": "Generate a title for this conversation:\n"},
        first_message,
    ]


def test_opencode_title_requests_are_sessions_of_their_own() -> None:
    gw = Gateway()
    main = fixture("harnesses/opencode_from_source.json")["requests"][0]["messages"]
    conversation = gw.send(main)
    other_first = {"role": "user", "content": "Why does beta.py count twice?"}
    titles = [gw.send(opencode_title(main[2])), gw.send(opencode_title(other_first))]
    assert len({conversation, *titles}) == 3
    # The conversation is not moved by them: its next request is its session.
    assert gw.send([*main, {"role": "assistant", "content": "Plan: one change."}]) == conversation


def test_clients_that_open_alike_are_told_apart_by_their_answers() -> None:
    gw = Gateway()
    hi: Messages = [{"role": "user", "content": "hi"}]
    # Three clients' first requests are the same bytes: nothing tells them apart yet.
    assert len({gw.send(hi) for _ in range(3)}) == 1
    said = {c: f"Hello from the answer to client {c}." for c in "abc"}
    asked = {c: f"Client {c} asks its second question." for c in "abc"}

    def turn(c: str, n: int) -> Messages:
        out = list(hi)
        for k in range(n):
            out += [
                {"role": "assistant", "content": f"{said[c]} ({k})"},
                {"role": "user", "content": f"{asked[c]} ({k})"},
            ]
        return out

    second = {c: gw.send(turn(c, 1)) for c in "abc"}
    assert len(set(second.values())) == 3, second
    for n in (2, 3):
        assert {c: gw.send(turn(c, n)) for c in "abc"} == second


def claude_code_messages(body: dict[str, Any]) -> tuple[Messages, Any]:
    """A recorded Claude Code request as the pipeline names it: translated to the chat
    shape, its billing header dropped."""
    chat = to_chat(body)
    messages, _ = without_billing_header(chat_messages(chat), True)
    return messages, chat.get("tools")


def test_claude_code_requests_derive_one_session_across_continue() -> None:
    """Without its session header (an older Claude Code, the SDK): the opening is the
    same although the environment message is a list of blocks on the first request
    and a string on the next, and the cache marks move."""
    requests = fixture("harnesses/claude_code_p_continue.json")["requests"]
    names = {derive_session(claude_code_messages(b)[0]) for b in requests}
    assert len(names) == 1, names


def test_claude_code_subagents_are_sessions_of_their_own_under_their_parent() -> None:
    """Recorded: Claude Code 2.1.332 launching a subagent (its Agent tool). The subagent
    sends the main conversation's session id, and its own in x-claude-code-agent-id;
    its tools include Agent too, so only that header tells it apart by name."""
    gw = Gateway()
    main, agent = fixture("harnesses/claude_code_subagent.json")["requests"]
    assert "x-claude-code-agent-id" not in main["headers"]
    assert "cc_is_subagent=true" in json.dumps(agent["body"]["system"])

    def send(recorded: dict[str, Any], body: dict[str, Any] | None = None) -> str:
        messages, tools = claude_code_messages(body or recorded["body"])
        return gw.send(messages, session_header(recorded["headers"]), tools)

    parent = "claude-00000000-0000-4000-8000-000000000000"
    assert send(main) == parent
    assert send(agent) == f"{parent}/agent-a0000000000000001"
    assert parent_of(f"{parent}/agent-a0000000000000001") == parent
    assert parent_of(parent) is None
    # The main conversation goes on while the subagent works (Claude Code runs it in the
    # background): each request keeps to its own session.
    answered = [{"role": "assistant", "content": [{"type": "text", "text": "Two modules."}]}]
    later = {**agent["body"], "messages": [*agent["body"]["messages"], *answered]}
    later["messages"].append({"role": "user", "content": "And the tests?"})
    assert send(agent, later) == f"{parent}/agent-a0000000000000001"
    assert send(main) == parent
    # A side call under the same id (no tools: a title) is a session of its own.
    title = {**main["body"], "tools": [], "system": "Write a title for this conversation."}
    assert parent_of(send(main, title)) == parent


def test_a_name_the_client_gives_is_kept_whatever_the_tools() -> None:
    gw = Gateway()
    messages = [{"role": "user", "content": "hi"}]
    assert gw.send(messages, "my-session") == "my-session"
    assert gw.send(messages, "claude-named-by-hand") == "claude-named-by-hand"


words = st.text(alphabet="abcdefgh ", min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    system=st.one_of(st.none(), words),
    users=st.lists(words, min_size=1, max_size=3),
    other=st.lists(words, min_size=1, max_size=3),
    answers=st.lists(words, min_size=1, max_size=4),
)
def test_openings_that_differ_never_share_a_session_and_later_turns_keep_theirs(
    system: str | None, users: list[str], other: list[str], answers: list[str]
) -> None:
    """Two conversations that differ in any message before their first answer never
    share a session; every later turn of a conversation maps to its session, however
    the two interleave."""
    head: Messages = [] if system is None else [{"role": "system", "content": system}]
    a = [*head, *({"role": "user", "content": u} for u in users)]
    b = [*head, *({"role": "user", "content": u} for u in other)]
    if a == b:
        return
    gw = Gateway()
    names = (gw.send(a), gw.send(b))
    assert names[0] != names[1]
    for k, said in enumerate(answers):
        for conv, name in zip((a, b), names, strict=True):
            conv += [
                {"role": "assistant", "content": f"{said} {k}"},
                {"role": "user", "content": f"next {k}"},
            ]
            assert gw.send(conv) == name


def test_an_opening_sent_as_blocks_or_as_a_string_is_one_conversation() -> None:
    """Claude Code sends a message as a list of blocks on one request and as a string
    on the next, moves its cache marks, and dates its reminders."""
    as_text = [
        {
            "role": "user",
            "content": "<system-reminder>Today is 2026-12-06.</system-reminder>\nFix it.",
        }
    ]
    as_blocks = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>Today is 2026-12-07.</system-reminder>"},
                {"type": "text", "text": "Fix it.", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]
    assert derive_session(as_text) == derive_session(as_blocks)
    with_image = [{**as_blocks[0], "content": [*as_blocks[0]["content"], {"type": "image_url"}]}]
    assert derive_session(with_image) != derive_session(as_blocks)


def test_through_the_pipeline_an_aider_chat_is_one_session_and_the_next_chat_another(
    store: Store, project: Project
) -> None:
    """The same through the turn pipeline (its repairs of aider's clock and repo map),
    answered by the scripted stand-in."""
    gw, _ = scripted_pipeline(store, n_ctx=32768)

    def session(messages: Messages) -> str:
        async def turn() -> str:
            body = {"model": "local", "messages": messages}
            async with gw.turn(body, project, None) as t:
                _, t.outcome = await gw.sender.chat(t.prepared)
                return t.prepared.state.session

        return asyncio.run(turn())

    chat = [session(m) for m in aider_turns()]
    assert len(set(chat)) == 1, chat
    assert session(another_aider_chat("Rename masked_stub.")) == chat[0] + "-2"
