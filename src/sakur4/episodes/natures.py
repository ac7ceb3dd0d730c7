"""What each part of a harness's messages is: its instructions, the user's request, tool
output, or the model's answer (issue 30: what may fold, by what it is, not by its role).

A harness does not keep these apart by role. Claude Code sends its environment as a
``system`` message after the first user message, and in ``-p --continue`` a file it
attaches as ``<system-reminder>`` blocks inside the user's message, next to the user's
words; OpenCode attaches a file as synthetic text parts of the user's message; aider
sends its repo map and the files in the chat as user messages. Each known harness
declares how it is recognised in its messages and how its user messages are cut, in its
own file (:mod:`sakur4.harnesses`: shapes read from each harness's own source, issue 30);
an unknown one keeps every user message whole and Unclassified (kept: never guessed).
Structure decides the rest, for every harness: ``tool`` messages are tool output,
assistant messages the answer, system messages instructions.

A user message that mixes natures is split into parts: slices of its text that
concatenate to it exactly, each recorded as an episode of its own (so each has a tier),
and joined again into one message when rendered. Pure: messages in, parts out.

Pasted and added files (issue 41), for every harness: a fenced code block of at least
``ATTACHMENT_TOKENS`` (estimated) in the user's words, or in a harness's messages that
carry files whole (aider's chat files and read-only files), is an attachment: recorded
as tool output, content that may fold, not words (a turn whose attachments outgrow the
window folds them rather than being refused). Shorter blocks stay part of the words: a
snippet quoted in a question is read with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sakur4.harnesses import FILE_MESSAGES, KNOWN, harness_named
from sakur4.harnesses.base import GENERIC, joined_text, message_text
from sakur4.vocabulary import Nature, estimate_tokens

# The smallest fenced block that is an attachment rather than part of the words: a
# pasted file, not a snippet quoted in a question (~160 lines of code; bench/gateway.py's
# 28-line pastes stay words). Estimated, as the text is classified before it is counted.
ATTACHMENT_TOKENS = 1000
# A fence's opening line (CommonMark: up to 3 spaces, 3+ backticks or tildes, an info
# string); its closing line is the same character, at least as many, nothing after.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n", re.M)


@dataclass(frozen=True)
class Part:
    """One episode to record: a harness message, or a slice of one.

    ``part``: 0 starts a harness message; k > 0 is its k-th slice, rendered joined to
    the slice before it.
    """

    message: dict[str, Any]
    nature: Nature
    part: int = 0


def detect(messages: Sequence[Mapping[str, Any]]) -> str:
    """The harness that sent ``messages``, from its system prompt (``generic``: none
    of the known harnesses claims them)."""
    system = "\n".join(
        t
        for m in messages
        if m.get("role") in ("system", "developer")
        and (t := message_text(m) or joined_text(m)) is not None
    )
    for h in KNOWN:
        if h.sent is not None and h.sent(system, messages):
            return h.name
    return GENERIC


def nature_by_role(role: str, kind: str) -> Nature:
    """What a message is by its structure alone: the rule for every harness, and for
    episodes recorded before they were classified."""
    if kind in ("tool_result",) or role == "tool":
        return Nature.TOOL_OUTPUT
    if role == "assistant" or kind == "tool_call":
        return Nature.ANSWER
    if role in ("system", "developer"):
        return Nature.INSTRUCTION
    return Nature.UNCLASSIFIED


def classify(messages: Sequence[Mapping[str, Any]], harness: str) -> list[Part]:
    """Every message as one or more parts, each with its nature, in order."""
    out: list[Part] = []
    for m in messages:
        role = str(m.get("role") or "")
        if role != "user":
            kind = "tool_call" if m.get("tool_calls") else ""
            out.append(Part(dict(m), nature_by_role(role, kind)))
            continue
        slices = _user_slices(m, harness)
        if len(slices) == 1:
            out.append(Part(dict(m), slices[0][1]))
            continue
        for k, (text, nature) in enumerate(slices):
            out.append(Part({"role": "user", "content": text}, nature, k))
    return out


def _user_slices(m: Mapping[str, Any], harness: str) -> list[tuple[str, Nature]]:
    """A user message's text as slices that concatenate to it, each with its nature
    (adjacent slices of one nature merged). One slice: the message is not split."""
    return _merge([piece for s in _by_harness(m, harness) for piece in _attached(*s)])


def _by_harness(m: Mapping[str, Any], harness: str) -> list[tuple[str, Nature]]:
    h = harness_named(harness)
    if h is not None and h.slices is not None:
        return h.slices(m)
    text = message_text(m)
    return [(text if text is not None else (joined_text(m) or ""), Nature.UNCLASSIFIED)]


def _attached(text: str, nature: Nature) -> list[tuple[str, Nature]]:
    """``text`` with each fenced block of at least ``ATTACHMENT_TOKENS`` split off as an
    attachment (tool output), where the text is the user's (words, or what cannot be
    classified) or aider's files; other text as it is. The slices concatenate to it;
    a block keeps its closing fence's line end (the whitespace that ends a slice stays
    with it, so a folded one keeps its separator)."""
    files = nature is Nature.INSTRUCTION and text.startswith(FILE_MESSAGES)
    if not (files or nature in (Nature.REQUEST, Nature.UNCLASSIFIED)):
        return [(text, nature)]
    if len(text) < ATTACHMENT_TOKENS * 4:  # no block that large can be in it
        return [(text, nature)]
    out: list[tuple[str, Nature]] = []
    pos = 0
    search = 0
    while (opening := _FENCE.search(text, search)) is not None:
        fence = opening.group(1)
        closing = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}[ \t]*(?:\n|$)", re.M)
        end = closing.search(text, opening.end())
        if end is None:
            break  # unclosed: not a block (CommonMark runs it to the end; kept as words)
        search = end.end()
        if estimate_tokens(text[opening.start() : end.end()]) < ATTACHMENT_TOKENS:
            continue
        if opening.start() > pos:
            out.append((text[pos : opening.start()], nature))
        out.append((text[opening.start() : end.end()], Nature.TOOL_OUTPUT))
        pos = end.end()
    rest = text[pos:]
    if out and not rest.strip():
        out[-1] = (out[-1][0] + rest, out[-1][1])  # trailing whitespace stays with the block
    elif rest or not out:
        out.append((rest, nature))
    return out


def _merge(slices: list[tuple[str, Nature]]) -> list[tuple[str, Nature]]:
    out: list[tuple[str, Nature]] = []
    for text, nature in slices:
        if out and out[-1][1] is nature:
            out[-1] = (out[-1][0] + text, nature)
        else:
            out.append((text, nature))
    return out
