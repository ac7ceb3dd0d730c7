"""What each part of a harness's messages is (issue 30), on what the harnesses send.

Claude Code's requests are recorded from the real Claude Code
(tests/fixtures/harnesses/claude_code_p_continue.json); OpenCode's and aider's are built
from their source in the shapes it documents (``*_from_source.json``; the fixtures'
README says which files). Each request goes through the gateway's own conversion
(Anthropic → chat, the billing header dropped) before it is classified, as a turn does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sakur4.episodes.natures import Part, classify, detect
from sakur4.gateway.translate import to_chat
from sakur4.turns.churn import drop_billing_header
from sakur4.vocabulary import Nature

HERE = Path(__file__).parent.parent / "fixtures" / "harnesses"
INSTRUCTION, REQUEST, TOOL = Nature.INSTRUCTION, Nature.REQUEST, Nature.TOOL_OUTPUT


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / name).read_text(encoding="utf-8"))
    return data


def claude_code_requests() -> list[list[dict[str, Any]]]:
    out = []
    for body in fixture("claude_code_p_continue.json")["requests"]:
        messages = to_chat(body)["messages"]
        kept, _ = drop_billing_header(messages[0]["content"])
        out.append([{**messages[0], "content": kept}, *messages[1:]])
    return out


def joined(parts: list[Part]) -> list[str]:
    """The messages' texts again, from their parts."""
    out: list[str] = []
    for p in parts:
        text = p.message["content"]
        if p.part == 0:
            out.append(text if isinstance(text, str) else "\n".join(x["text"] for x in text))
        else:
            out[-1] += text
    return out


def natures(parts: list[Part], needle: str) -> set[Nature]:
    return {p.nature for p in parts if needle in str(p.message.get("content"))}


@pytest.mark.parametrize("turn", range(len(claude_code_requests())))
def test_claude_code_requests_keep_instructions_and_requests_apart_from_tool_output(
    turn: int,
) -> None:
    messages = claude_code_requests()[turn]
    assert detect(messages) == "claude-code"
    parts = classify(messages, "claude-code")
    # Slices, never rewrites: the parts of each message are its text, exactly.
    assert joined(parts) == [
        m["content"] if isinstance(m["content"], str) else "" for m in messages
    ]
    prompts = fixture("claude_code_p_continue.json")["prompts"]
    for prompt in prompts[: turn + 1]:
        if any(prompt in str(m.get("content")) for m in messages):
            assert natures(parts, prompt) == {REQUEST}, prompt
    # The environment comes as a system message after the first user message: the
    # harness's instruction, whatever its place (issue 30: it was Referenced).
    assert natures(parts, "# Environment\nYou have been invoked") == {INSTRUCTION}
    assert natures(parts, "Attribution for git commits") == {INSTRUCTION}
    for p in parts:
        if p.message["role"] == "tool":
            assert p.nature is TOOL
        if p.message["role"] == "assistant":
            assert p.nature is Nature.ANSWER


def test_claude_code_embeds_an_attached_file_in_the_users_message_and_it_splits_off() -> None:
    last = classify(claude_code_requests()[-1], "claude-code")
    embedded = [p for p in last if "Result of calling the Read tool:" in p.message["content"]]
    assert len(embedded) == 1
    (tool,) = embedded
    assert tool.nature is TOOL
    assert tool.part > 0
    assert "Called the Read tool with the following input" in tool.message["content"]
    # The user's words on either side are parts of the same message, requests.
    i = last.index(tool)
    assert last[i - 1].nature is REQUEST
    assert "Read beta.py" in last[i - 1].message["content"]
    assert last[i + 1].nature is REQUEST
    assert last[i + 1].part == tool.part + 1
    assert "Look at @alpha.py again" in last[i + 1].message["content"]


def test_opencode_attached_file_parts_are_tool_output_and_reminders_instructions() -> None:
    messages = fixture("opencode_from_source.json")["requests"][0]["messages"]
    assert detect(messages) == "opencode"
    parts = classify(messages, "opencode")
    assert joined(parts) == [
        m["content"]
        if isinstance(m["content"], str)
        else "\n".join(x["text"] for x in m["content"])
        for m in messages
    ]
    assert [(p.message["role"], p.nature, p.part) for p in parts] == [
        ("system", INSTRUCTION, 0),
        ("system", INSTRUCTION, 0),
        ("user", REQUEST, 0),
        ("user", TOOL, 1),  # the synthetic Read call and the file it returned
        ("assistant", Nature.ANSWER, 0),
        ("tool", TOOL, 0),
        ("assistant", Nature.ANSWER, 0),
        ("user", REQUEST, 0),
        ("user", INSTRUCTION, 1),  # plan mode's reminder
    ]
    assert parts[2].message["content"] == "Explain @README.md\n"


def test_aider_context_is_instruction_and_command_output_is_tool_output() -> None:
    messages = fixture("aider_from_source.json")["requests"][0]["messages"]
    assert detect(messages) == "aider"
    parts = classify(messages, "aider")
    assert len(parts) == len(messages)  # aider's messages are one thing each: no split
    by_start = {p.message["content"][:30]: p.nature for p in parts}
    assert by_start["Here are summaries of some fil"] is INSTRUCTION  # the repo map
    assert by_start["I have *added these files to t"] is INSTRUCTION  # the files in the chat
    assert by_start["I ran this command:\n\npytest -q"] is TOOL  # /run's output
    assert by_start["I committed the changes with g"] is TOOL
    assert by_start["Make greet say hi instead of h"] is REQUEST
    assert by_start["Fix the test too."] is REQUEST
    assert by_start["# *SEARCH/REPLACE block* Rules"] is INSTRUCTION
    assert by_start["Ok."] is Nature.ANSWER


def test_an_unknown_harness_keeps_every_user_message_whole_and_unclassified() -> None:
    """The safe default: what cannot be classified is kept, never guessed (a reminder
    in an unknown harness's message may be anything)."""
    text = "<system-reminder>\nResult of calling the Read tool:\n1\tx\n</system-reminder>\n\nHi."
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": text},
        {"role": "assistant", "content": "Hello."},
    ]
    assert detect(messages) == "generic"
    parts = classify(messages, "generic")
    assert [(p.nature, p.part) for p in parts] == [
        (INSTRUCTION, 0),
        (Nature.UNCLASSIFIED, 0),
        (Nature.ANSWER, 0),
    ]
    assert parts[1].message == messages[1]  # the harness's message as it came


def test_words_between_reminders_are_their_own_part_and_the_text_is_kept_exactly() -> None:
    """A first prompt naming a file, as Claude Code builds it: its context reminder, the
    user's words, then the attached file; each slice keeps the whitespace after it."""
    context = "<system-reminder>\nAs you answer the user's questions, use this context.\n"
    context += "</system-reminder>"
    called = '<system-reminder>\nCalled the Read tool with the following input: {"file_path":"a"}'
    called += "\n</system-reminder>"
    result = "<system-reminder>\nResult of calling the Read tool:\n1\tx = 1\n</system-reminder>"
    text = f"{context}\n\n\nExplain @a.py please.\n\n\n{called}\n\n\n{result}\n"
    parts = classify([{"role": "user", "content": text}], "claude-code")
    assert [(p.nature, p.part) for p in parts] == [(INSTRUCTION, 0), (REQUEST, 1), (TOOL, 2)]
    assert [p.message["content"] for p in parts] == [
        f"{context}\n\n\n",
        "Explain @a.py please.\n\n\n",
        f"{called}\n\n\n{result}\n",
    ]
