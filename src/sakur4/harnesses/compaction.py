"""A harness's own compaction request, answered from the cached conversation (issue 28).

OpenCode compacts a session by sending the whole conversation again as text, under a
summariser's system prompt and with no tools (1.18.33, recorded in
tests/wrap/fixtures/opencode_compaction.json)::

    system: "You are a context summarization agent. …"
    user:   "Here is the conversation so far:\\n\\n<conversation>\\n[User]: …\\n\\n
             [Assistant]: …\\n</conversation>\\n\\n<the instruction and its template>"

Its first token differs from the prompt the server holds for the session, so the
server processes all of it again (opencode #25120, #10342 on llama.cpp). The same
request, rewritten as the session's last turn (its messages and tools, as the harness
sent them: the gateway renders them to the prompt the server cached) plus the
conversation's last answer and one user message carrying the summariser's
instructions, resumes the cached prompt: only the instruction is processed.

Claude Code (2.1.332, recorded in tests/fixtures/harnesses/claude_code_compact.json)
compacts the other way: the same system prompt, tools and messages, with its
summariser's instruction ("Your task is to create a detailed summary of the
conversation so far …") as one more text block of the last user message. That request
already extends the prompt the server cached, so it needs no rewrite: it is named
(:func:`extends_cached`) and served as the session's next turn.

Which harness compacts which way, and with which words, each harness declares in its
own file (:class:`~sakur4.harnesses.base.QuotesConversation`,
:class:`~sakur4.harnesses.base.ExtendsConversation`). This module only recognises and
rewrites; the turn pipeline decides the session and sends the result as that session's
next turn (its receipt names the rewrite).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sakur4.episodes.messages import text_of
from sakur4.harnesses import KNOWN
from sakur4.harnesses.base import ExtendsConversation, QuotesConversation

# The shortest user message whose quotation is taken as evidence of the conversation.
MIN_QUOTED = 8


@dataclass(frozen=True, slots=True)
class Compaction:
    """A recognised compaction request: who sent it, the conversation it quotes, the
    instruction around it, and the conversation's last answer (None: it ends on
    something else, a tool call or the user)."""

    harness: str
    conversation: str
    instruction: str
    answer: str | None


@dataclass(frozen=True, slots=True)
class Served:
    """The rewritten request: the session it continues and the body to plan."""

    session: str
    body: dict[str, Any]
    compaction: Compaction

    def receipt(self) -> dict[str, Any]:
        """What the receipt says about the rewrite."""
        return {
            "harness": self.compaction.harness,
            "served_from": "the session's cached prompt plus the harness's instruction",
            "conversation_chars_not_resent": len(self.compaction.conversation),
        }


def recognise(body: Mapping[str, Any]) -> Compaction | None:
    """The compaction request ``body`` is, or None.

    A harness's that quotes the conversation (OpenCode's): no tools, a system prompt and
    one user message that opens with its words ("Here is the conversation so far:") and
    quotes the conversation in its tags (<conversation>)."""
    if body.get("tools"):
        return None
    messages = body.get("messages")
    if not isinstance(messages, list) or len(messages) != 2:
        return None
    system, user = messages
    if not isinstance(system, Mapping) or not isinstance(user, Mapping):
        return None
    if system.get("role") != "system" or user.get("role") != "user":
        return None
    text = text_of(user)
    for h in KNOWN:
        if isinstance(h.compaction, QuotesConversation):
            found = _quoted(h.compaction, text, text_of(system))
            if found is not None:
                return Compaction(h.name, *found)
    return None


def _quoted(q: QuotesConversation, text: str, system: str) -> tuple[str, str, str | None] | None:
    """The conversation, the instruction and the last answer ``text`` quotes as ``q``
    does (None: it is not such a request)."""
    if not text.startswith(q.opening) or q.open_tag not in text or q.close_tag not in text:
        return None
    start = text.index(q.open_tag) + len(q.open_tag)
    end = text.rindex(q.close_tag)
    if end < start:
        return None
    conversation = text[start:end].strip("\n")
    after = text[end + len(q.close_tag) :].strip()
    instruction = "\n\n".join(part for part in (system.strip(), q.preface, after) if part)
    # Entries are separated by a blank line and open with a bracketed role.
    last = conversation.rsplit("\n\n[", 1)[-1]
    last = last if last.startswith("[") else "[" + last
    answer = last[len(q.answer) :] if last.startswith(q.answer) else None
    return conversation, instruction, answer


def extends_cached(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the receipt says of a compaction request that extends the conversation it
    summarises as it stands (Claude Code's), or None when ``body`` is not one.

    Its tools and earlier messages are the conversation's, unchanged; the summariser's
    instruction is the last user message's last text."""
    messages = body.get("messages")
    if not body.get("tools") or not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return None
    said = text_of(last)
    for h in KNOWN:
        if isinstance(h.compaction, ExtendsConversation) and h.compaction.task in said:
            return {
                "harness": h.name,
                "served_from": "the session's cached prompt: the request extends it, "
                "nothing rewritten",
            }
    return None


def quotes(c: Compaction, previous: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``c`` summarises the conversation whose last request was ``previous``:
    one of its user messages is quoted (as it is, or as a JSON string as OpenCode
    quotes them). OpenCode quotes only the older part of a long conversation (it keeps
    its newest messages verbatim), so no one message is sure to be there."""
    for m in previous:
        said = text_of(m).strip() if m.get("role") == "user" else ""
        if len(said) >= MIN_QUOTED and (
            said in c.conversation or json.dumps(said, ensure_ascii=False) in c.conversation
        ):
            return True
    return False


def serve_from_cache(
    body: Mapping[str, Any],
    sessions: Iterable[tuple[str, Sequence[Mapping[str, Any]], Any]],
) -> Served | None:
    """``body`` rewritten onto the first of ``sessions`` (name, its last request's
    messages, that request's tools; the newest first) whose conversation it
    summarises, or None when it is no compaction request or quotes none of them.

    The summary is then written from the whole cached conversation, where OpenCode
    asked for its older part only (the newest part it keeps verbatim as well)."""
    c = recognise(body)
    if c is None:
        return None
    for name, previous, tools in sessions:
        if not previous or not quotes(c, previous):
            continue
        messages: list[dict[str, Any]] = [dict(m) for m in previous]
        answered = {text_of(m).strip() for m in previous if m.get("role") == "assistant"}
        if c.answer and c.answer.strip() not in answered:
            # The answer to the last request: in the server's cache right after it.
            messages.append({"role": "assistant", "content": c.answer})
        messages.append({"role": "user", "content": c.instruction})
        out = {k: v for k, v in body.items() if k not in ("messages", "tools", "tool_choice")}
        out["messages"] = messages
        if tools:
            # The tools the cached prompt was rendered with: without them the prompt
            # differs from the first token after the system prompt.
            out["tools"] = tools
        return Served(name, out, c)
    return None


@dataclass(frozen=True, slots=True)
class AsServed:
    """How the pipeline serves a compaction request: the body to plan, the session it
    continues (None: named as any request is), and what its receipt says."""

    body: Mapping[str, Any]
    session: str | None
    receipt: dict[str, Any]


def as_served(
    body: Mapping[str, Any],
    sessions: Iterable[tuple[str, Sequence[Mapping[str, Any]], Any]],
) -> AsServed | None:
    """``body`` as the pipeline serves it when it is a harness's compaction request
    (None: it is none): OpenCode's rewritten onto the session it summarises
    (:func:`serve_from_cache`), Claude Code's as it came (:func:`extends_cached`)."""
    served = serve_from_cache(body, sessions)
    if served is not None:
        return AsServed(served.body, served.session, served.receipt())
    said = extends_cached(body)
    return AsServed(body, None, said) if said is not None else None
