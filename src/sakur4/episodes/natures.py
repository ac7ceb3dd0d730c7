"""What each part of a harness's messages is: its instructions, the user's request, tool
output, or the model's answer (issue 30: what may fold, by what it is, not by its role).

A harness does not keep these apart by role. Claude Code sends its environment as a
``system`` message after the first user message, and in ``-p --continue`` a file it
attaches as ``<system-reminder>`` blocks inside the user's message, next to the user's
words; OpenCode attaches a file as synthetic text parts of the user's message; aider
sends its repo map and the files in the chat as user messages. Each known shape has a
classifier here; an unknown one keeps every user message whole and Unclassified (kept:
never guessed). Structure decides the rest, for every harness: ``tool`` messages are
tool output, assistant messages the answer, system messages instructions.

A user message that mixes natures is split into parts: slices of its text that
concatenate to it exactly, each recorded as an episode of its own (so each has a tier),
and joined again into one message when rendered. Pure: messages in, parts out.

Shapes, from each harness's own source (docs/DESIGN.md, issue 30):
- Claude Code 2.1.332, recorded (tests/fixtures/harnesses): attachments become
  ``Called the Read tool with the following input: {…}`` and ``Result of calling the
  Read tool:\\n…`` reminders (also ``Note: … changed on disk since you last read it``);
  other reminders (attribution, CLAUDE.md context, dates) are instructions.
- OpenCode (``session/prompt.ts``, ``message-v2.ts``): an attached file is a text part
  ``Called the Read tool with the following input: {"filePath":…}`` and the next text
  part, the Read tool's output; ``<system-reminder>`` parts are instructions.
- aider (``coders/base_coder.py``, ``base_prompts.py``, ``prompts.py``, ``linter.py``):
  repo map, read-only and chat files are instructions; ``I ran this command:`` (``/run``),
  lint output and its commit notes are tool output.

Pasted and added files (issue 41), for every harness: a fenced code block of at least
``ATTACHMENT_TOKENS`` (estimated) in the user's words, or in aider's chat-files and
read-only-files messages, is an attachment: recorded as tool output, content that may
fold, not words (a turn whose attachments outgrow the window folds them rather than
being refused). Shorter blocks stay part of the words: a snippet quoted in a question
is read with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from sakur4.vocabulary import Nature, estimate_tokens

Harness = Literal["claude-code", "opencode", "aider", "generic"]
HARNESSES: tuple[Harness, ...] = get_args(Harness)

# A harness's reminder block inside a message (Claude Code's ``<system-reminder>``): the
# one pattern for it, here and in the churn repair (turns/churn.py).
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)
# Claude Code's attachments (its Tve/zJe helpers) and file notes, inside a reminder.
_CLAUDE_TOOL = re.compile(
    r"<system-reminder>\s*(?:Called the \S+ tool with the following input:"
    r"|Result of calling the \S+ tool:"
    r"|Note: .{0,600}?(?:changed on disk since you last read it"
    r"|is not shown exactly as it is on disk))",
    re.S,
)
_OPENCODE_CALL = re.compile(r"\s*Called the \S+ tool (?:with the following input:|on )")
# aider's prompts, by what they start with.
_AIDER_CONTEXT = (
    "Here are summaries of some files present in my git repository.",
    "Here are some READ ONLY files, provided for your reference.",
    "I have *added these files to the chat*",
    "I am not sharing any files that you can edit yet.",
    "Don't try and edit any existing code without asking me to add the files",
    "I switched to a new code base.",
    "I added these files to the chat:",
)
# aider's messages that carry files whole (its chat files, its read-only files).
_AIDER_FILES = (
    "Here are some READ ONLY files, provided for your reference.",
    "I have *added these files to the chat*",
)
# The smallest fenced block that is an attachment rather than part of the words: a
# pasted file, not a snippet quoted in a question (~160 lines of code; bench/gateway.py's
# 28-line pastes stay words). Estimated, as the text is classified before it is counted.
ATTACHMENT_TOKENS = 1000
# A fence's opening line (CommonMark: up to 3 spaces, 3+ backticks or tildes, an info
# string); its closing line is the same character, at least as many, nothing after.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n", re.M)
_AIDER_TOOL = (
    "I ran this command:",
    "# Fix any errors below, if possible.",
    "## Running: ",
    "I committed the changes with git hash",
    "I updated the files.",
    "I edited the files myself.",
)


@dataclass(frozen=True)
class Part:
    """One episode to record: a harness message, or a slice of one.

    ``part``: 0 starts a harness message; k > 0 is its k-th slice, rendered joined to
    the slice before it.
    """

    message: dict[str, Any]
    nature: Nature
    part: int = 0


def _text(message: Mapping[str, Any]) -> str | None:
    content = message.get("content")
    return content if isinstance(content, str) else None


def detect(messages: Sequence[Mapping[str, Any]]) -> Harness:
    """The harness that sent ``messages``, from its system prompt (``generic``: unknown)."""
    system = "\n".join(
        t
        for m in messages
        if m.get("role") in ("system", "developer") and (t := _text(m) or _joined(m)) is not None
    )
    if "Claude Agent SDK" in system or "Claude Code" in system:
        return "claude-code"
    if re.search(r"\bopencode\b", system, re.I):
        return "opencode"
    if system.startswith("Act as an expert") or any(
        (_text(m) or "").startswith(_AIDER_CONTEXT[:3]) for m in messages if m.get("role") == "user"
    ):
        return "aider"
    return "generic"


def _joined(message: Mapping[str, Any]) -> str | None:
    content = message.get("content")
    if not isinstance(content, list):
        return None
    return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))


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


def classify(messages: Sequence[Mapping[str, Any]], harness: Harness) -> list[Part]:
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


def _user_slices(m: Mapping[str, Any], harness: Harness) -> list[tuple[str, Nature]]:
    """A user message's text as slices that concatenate to it, each with its nature
    (adjacent slices of one nature merged). One slice: the message is not split."""
    return _merge([piece for s in _by_harness(m, harness) for piece in _attached(*s)])


def _by_harness(m: Mapping[str, Any], harness: Harness) -> list[tuple[str, Nature]]:
    text = _text(m)
    if harness == "claude-code" and text is not None:
        return _claude_code(text)
    if harness == "opencode" and isinstance(m.get("content"), list):
        return _opencode(m["content"])
    whole = text if text is not None else (_joined(m) or "")
    if harness == "aider":
        return [(whole, _aider(whole))]
    if harness == "opencode":
        return [(whole, Nature.INSTRUCTION if _is_reminder(whole) else Nature.REQUEST)]
    return [(whole, Nature.UNCLASSIFIED)]


def _attached(text: str, nature: Nature) -> list[tuple[str, Nature]]:
    """``text`` with each fenced block of at least ``ATTACHMENT_TOKENS`` split off as an
    attachment (tool output), where the text is the user's (words, or what cannot be
    classified) or aider's files; other text as it is. The slices concatenate to it;
    a block keeps its closing fence's line end (the whitespace that ends a slice stays
    with it, so a folded one keeps its separator)."""
    files = nature is Nature.INSTRUCTION and text.startswith(_AIDER_FILES)
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


def _is_reminder(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith("<system-reminder>") and stripped.endswith("</system-reminder>")


def _claude_code(text: str) -> list[tuple[str, Nature]]:
    """Reminder blocks and the user's words between them; whitespace between two
    slices stays with the one before (so a folded slice keeps its separator)."""
    out: list[tuple[str, Nature]] = []
    pos = 0
    lead = ""
    for match in REMINDER.finditer(text):
        between = text[pos : match.start()]
        if between.strip():
            words = between.lstrip()
            if out:
                out[-1] = (out[-1][0] + between[: len(between) - len(words)], out[-1][1])
            else:
                words = between
            out.append((lead + words, Nature.REQUEST))
            lead = ""
        elif out:
            out[-1] = (out[-1][0] + between, out[-1][1])
        else:
            lead += between
        block = match.group(0)
        nature = Nature.TOOL_OUTPUT if _CLAUDE_TOOL.match(block) else Nature.INSTRUCTION
        out.append((lead + block, nature))
        lead = ""
        pos = match.end()
    rest = text[pos:]
    if rest.strip() and out:
        words = rest.lstrip()
        out[-1] = (out[-1][0] + rest[: len(rest) - len(words)], out[-1][1])
        out.append((words, Nature.REQUEST))
    elif rest.strip() or not out:
        out.append((lead + rest, Nature.REQUEST))
    else:
        out[-1] = (out[-1][0] + rest, out[-1][1])
    return out


def _opencode(parts: Sequence[Any]) -> list[tuple[str, Nature]]:
    """Text parts, joined as the store joins them (a newline between parts); a Read
    call's synthetic part and the output after it are tool output."""
    texts: list[str] = []
    for p in parts:
        if isinstance(p, str):
            texts.append(p)
        elif isinstance(p, Mapping) and isinstance(p.get("text"), str):
            texts.append(p["text"])
    out: list[tuple[str, Nature]] = []
    after_call = False
    for i, t in enumerate(texts):
        sep = "\n" if i + 1 < len(texts) else ""
        if _OPENCODE_CALL.match(t):
            nature, after_call = Nature.TOOL_OUTPUT, True
        elif after_call:
            nature, after_call = Nature.TOOL_OUTPUT, False
        elif _is_reminder(t):
            nature = Nature.INSTRUCTION
        else:
            nature = Nature.REQUEST
        out.append((t + sep, nature))
    return out or [("", Nature.REQUEST)]


def _aider(text: str) -> Nature:
    if text.startswith(_AIDER_TOOL):
        return Nature.TOOL_OUTPUT
    if text.startswith(_AIDER_CONTEXT):
        return Nature.INSTRUCTION
    return Nature.REQUEST


def _merge(slices: list[tuple[str, Nature]]) -> list[tuple[str, Nature]]:
    out: list[tuple[str, Nature]] = []
    for text, nature in slices:
        if out and out[-1][1] is nature:
            out[-1] = (out[-1][0] + text, nature)
        else:
            out.append((text, nature))
    return out
