"""The policies of the harnesses users would pick, as their sources publish them.

Both run on the direct path (:mod:`sakur4.demo.direct`) against the same server and
script as every other strategy; each constant names where it comes from.

**OpenCode** (anomalyco/opencode, ``packages/opencode/src/session/compaction.ts``
at 001aa6c):

- *prune*, after each user turn (``SessionCompaction.prune`` at the end of
  ``SessionPrompt.loop``): walk back over completed tool results, skipping the last
  two user turns and the ``skill`` tool (``PRUNE_PROTECTED_TOOLS``), stopping at a
  summary or at a result already pruned; once more than ``PRUNE_PROTECT`` (40,000)
  estimated tokens of output lie behind, every older result is to prune, and they
  are pruned only when that frees more than ``PRUNE_MINIMUM`` (20,000). Estimates
  are ``util/token.ts``'s (characters weighted by kind). A pruned result is sent as
  ``[Old tool result content cleared]`` (``message-v2.ts``). The constants are
  absolute, not scaled to the window: below ~60k tokens of window, prune never acts
  before compaction does.
- *compaction* when the prompt passes the limit (``session/overflow.ts``: the
  context less the output reserve; here the bench's trigger, as for summarise):
  the default compaction prompt, sent with ``system: []`` and ``tools: {}`` — so
  its prompt shares no prefix with the conversation's.

**OpenCode 1.18.33** (``opencode-1.18``: the release ``scripts/setup-tests`` installs,
read from the strings of its binary, ``tests/wrap/opencode``; the source above is older):

- *prune* is opt-in (``compaction.prune`` must be set), so it never runs by default;
- *compaction* when the prompt reaches the usable window (the context less the output
  reserve: its own ``isOverflow``, not the bench's trigger) keeps the newest turns
  verbatim, whole turns from the newest back while they fit ``preserve_recent_tokens``
  (``min(15,000, max(2,000, 25 % of the usable window))``, OpenCode's estimate), a turn
  that does not fit cut to the suffix that does; everything before is written out as
  a transcript (``[User]:``, ``[Assistant]:``, ``[Assistant tool call]: name(args)``,
  ``[Tool result]:`` cut at 2,000 characters) inside ``<conversation>`` tags in one
  user message, with the anchored-summary instruction and template
  (:data:`ANCHORED_TEMPLATE`; the previous summary in ``<prior-summary>`` tags after
  the first), sent with ``system: []`` and ``tools: {}``: it shares no prefix with
  the conversation.
  The next prompts are the system prompt, the summary, and the kept turns.

**Claude Code** (its source is not published; the constants are those of the
analyses of its ``services/compact/``: ``autoCompact.ts`` ``AUTOCOMPACT_BUFFER_TOKENS``
13,000 below an effective window of the context less 20,000 — 167k of 200k, 83.5 %
— and ``microCompact.ts``'s clearing of all but the 5 most recent tool results to
``[Old tool result content cleared]``):

- *clear old tool results* when the prompt reaches the auto-compact threshold,
  keeping the 5 most recent;
- *auto-compact* (a summary, the conversation's own prefix and tools kept: Claude
  Code forks the compaction on the cached conversation) when clearing leaves the
  prompt at or above the threshold. The threshold is 83.5 % of the window: the
  absolute buffers (33,000 tokens) exceed the bench's windows.

**Claude Code 2.1.332** (``claude-code-2.1``: the release ``scripts/setup-tests``
installs, read from its binary's strings): the clearing above runs only where
Anthropic's API rejects a prompt with a context hint (``context-hint-2026-04-09``) and
only when it saves at least 20,000 tokens, so against a local server only the
auto-compact acts, at the same threshold.
"""

from __future__ import annotations

import unicodedata

from sakur4.demo.direct import SUMMARY_PREFIX, Call, Message, Summarise, Turn

CLEARED = "[Old tool result content cleared]"

PRUNE_MINIMUM = 20_000  # compaction.ts
PRUNE_PROTECT = 40_000  # compaction.ts
PRUNE_PROTECTED_TOOLS = ("skill",)  # compaction.ts

OPENCODE_PROMPT = (  # compaction.ts's defaultPrompt, first paragraph
    "Provide a detailed prompt for continuing our conversation above.\n"
    "Focus on information that would be helpful for continuing the conversation, "
    "including what we did, what we're doing, which files we're working on, and what "
    "we're going to do next.\nThe summary that you construct will be used so that "
    "another agent can read it and continue the work.\n"
    "Do not call any tools. Respond only with the summary text."
)

# OpenCode 1.18.33 (its binary's strings): the anchored summary's request.
PRESERVE_MIN, PRESERVE_MAX, PRESERVE_SHARE = 2_000, 15_000, 0.25
TOOL_RESULT_CHARS = 2_000  # a transcript's tool result, cut ("\n[truncated]")
ANCHORED_NEW = (
    "Create a new anchored summary from the conversation history in the <conversation> "
    "tags above so another coding agent can continue the work."
)
ANCHORED_TEMPLATE = """Output exactly the Markdown structure shown inside <template> and \
keep the section order unchanged. Do not include the <template> tags in your response.
<template>
## Objective
- [one or two brief sentences describing what the user is trying to accomplish]

## Important Details
- [constraints/preferences, decisions and why, important facts/assumptions, exact \
context needed to continue, or "(none)"]

## Work State
### Completed
- [finished work, verified facts, or changes made; otherwise "(none)"]

### Active
- [current work, partial changes, or investigation state; otherwise "(none)"]

### Blocked
- [blockers, failing commands, or unknowns; otherwise "(none)"]

## Next Move
1. [immediate concrete action, or "(none)"]
2. [next action if known, or "(none)"]

## Relevant Files
- [file or directory path: why it matters, or "(none)"]
</template>

Rules:
- Keep every section, even when empty.
- Use terse bullets, not prose paragraphs.
- Preserve exact file paths, symbols, commands, error strings, URLs, and identifiers \
when known.
- Do not mention the summary process or that context was compacted."""
ANCHORED_MERGE = (
    "The <prior-summary> summarizes everything that happened before the <conversation>. "
    "Construct a new summary that combines both. The <prior-summary> is discarded after "
    "this: anything you do not carry into the new summary is lost."
)  # the first paragraph of the release's merge rules

CLAUDE_AUTOCOMPACT = 167_000 / 200_000  # autoCompact.ts: (200k - 20k) - 13k
CLAUDE_KEEP_RESULTS = 5  # microCompact.ts


def opencode_estimate(text: str) -> int:
    """OpenCode's token estimate (``util/token.ts``): characters weighted by kind."""
    count = 0.0
    for ch in text:
        kind = unicodedata.category(ch)
        if kind[0] == "N":
            count += 1 / 1.9
        elif kind[0] in "PS":
            count += 1 / 1.2
        elif ch.isspace():
            count += 1 / 2.5
        else:
            count += 1 / 3.5
    return int(count)


def _tool_names(history: list[Message]) -> dict[str, str]:
    """Each tool call's id to its tool's name."""
    names = {}
    for m in history:
        for c in m.get("tool_calls") or ():
            names[str(c.get("id"))] = str((c.get("function") or {}).get("name"))
    return names


def _cleared(history: list[Message], which: set[int]) -> list[Message]:
    return [{**m, "content": CLEARED} if i in which else m for i, m in enumerate(history)]


class OpenCode:
    """OpenCode's prune-then-compact (see the module docstring)."""

    name = "opencode"

    def __init__(self, summary_tokens: int) -> None:
        self.compaction = Summarise(summary_tokens, request=OPENCODE_PROMPT, bare=True)
        self.pruned: set[int] = set()  # history indices sent as CLEARED
        self.users_seen = 0

    def prune(self, history: list[Message]) -> int:
        """Mark old tool results pruned as ``SessionCompaction.prune`` does; returns how
        many it marked (0 when they would free ``PRUNE_MINIMUM`` or less)."""
        names = _tool_names(history)
        total = pruned = turns = 0
        marked: list[int] = []
        for i in range(len(history) - 1, -1, -1):
            m = history[i]
            turns += m.get("role") == "user"
            if turns < 2:
                continue
            if i < self.compaction.tail_from:  # behind the summary
                break
            if m.get("role") != "tool":
                continue
            if names.get(str(m.get("tool_call_id"))) in PRUNE_PROTECTED_TOOLS:
                continue
            if i in self.pruned:
                break
            estimate = opencode_estimate(str(m.get("content") or ""))
            total += estimate
            if total > PRUNE_PROTECT:
                pruned += estimate
                marked.append(i)
        if pruned <= PRUNE_MINIMUM:
            return 0
        self.pruned.update(marked)
        return len(marked)

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        users = sum(m.get("role") == "user" for m in history)
        event = None
        if users > self.users_seen:  # a new user turn: the previous one's loop ended
            self.users_seen = users
            n = self.prune(history[:-1])
            event = f"pruned {n} results" if n else None
        turn = await self.compaction.prepare(index, _cleared(history, self.pruned), call)
        events = [e for e in (event, turn.event) if e]
        return Turn(turn.messages, "; ".join(events) if events else None)

    @property
    def evicted(self) -> int:
        return len(self.pruned) + self.compaction.replaced


class ClaudeCode:
    """Claude Code's clear-old-tool-results, then auto-compact (module docstring);
    ``clear`` False: 2.1.332 against a local server, auto-compact alone."""

    def __init__(self, summary_tokens: int, *, clear: bool = True) -> None:
        self.name = "claude-code" if clear else "claude-code-2.1"
        self.clear = clear
        self.compaction = Summarise(summary_tokens, trigger=CLAUDE_AUTOCOMPACT)
        self.cleared: set[int] = set()

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        threshold = int(call.budget.window * CLAUDE_AUTOCOMPACT)
        shown = _cleared(history, self.cleared)
        current = self.compaction.current(shown)
        event = None
        if self.clear and len((await call.measure(current)).tokens) >= threshold:
            tools = [
                i
                for i, m in enumerate(history)
                if m.get("role") == "tool" and i >= self.compaction.tail_from
            ]
            old = set(tools[:-CLAUDE_KEEP_RESULTS]) - self.cleared
            if old:
                self.cleared |= old
                shown = _cleared(history, self.cleared)
                event = f"cleared {len(old)} results"
        turn = await self.compaction.prepare(index, shown, call)
        events = [e for e in (event, turn.event) if e]
        return Turn(turn.messages, "; ".join(events) if events else None)

    @property
    def evicted(self) -> int:
        return len(self.cleared) + self.compaction.replaced


def transcript(messages: list[Message]) -> str:
    """Messages as OpenCode 1.18.33 writes them into its compaction request."""
    names = _tool_names(messages)
    out = []
    for m in messages:
        role, text = m.get("role"), str(m.get("content") or "")
        if role == "user":
            out.append(f"[User]: {text}")
        elif role == "assistant":
            lines = [f"[Assistant]: {text}"] if text else []
            for c in m.get("tool_calls") or ():
                f = c.get("function") or {}
                lines.append(f"[Assistant tool call]: {f.get('name')}({f.get('arguments')})")
            out.append("\n".join(lines))
        elif role == "tool":
            if len(text) > TOOL_RESULT_CHARS:
                text = text[:TOOL_RESULT_CHARS] + "\n[truncated]"
            name = names.get(str(m.get("tool_call_id")), "?")
            out.append(f"[Tool result]: {text}" if name else text)
    return "\n\n".join(x for x in out if x)


def anchored_request(conversation: str, previous: str | None) -> str:
    head = f"Here is the conversation so far:\n\n<conversation>\n{conversation}\n</conversation>"
    if previous is None:
        return "\n\n".join([head, ANCHORED_NEW, ANCHORED_TEMPLATE])
    prior = (
        "Here is the summary of the conversation before the <conversation> above:\n\n"
        f"<prior-summary>\n{previous}\n</prior-summary>"
    )
    return "\n\n".join([head, prior, ANCHORED_MERGE, ANCHORED_TEMPLATE])


def recent_start(messages: list[Message], first: int, budget: int) -> int:
    """Where OpenCode 1.18.33's kept tail starts: whole turns (a user message and what
    follows it) from the newest back while their estimate fits ``budget``; the turn
    that does not fit is cut to its longest suffix that does (not before its first
    reply); ``first`` when nothing before it would be summarised."""
    starts = [i for i in range(first, len(messages)) if messages[i].get("role") == "user"]
    ends = [*starts[1:], len(messages)]

    def size(a: int, b: int) -> int:
        return sum(opencode_estimate(str(m.get("content") or "")) for m in messages[a:b])

    used, start = 0, len(messages)
    for a, b in zip(reversed(starts), reversed(ends), strict=True):
        need = size(a, b)
        if used + need <= budget:
            used, start = used + need, a
            continue
        for k in range(a + 1, b):
            if used + size(k, b) <= budget:
                start = k
                break
        break
    return max(start, first)


class OpenCodeAnchored:
    """OpenCode 1.18.33's compaction: the newest turns kept, the rest summarised from a
    transcript in a bare request (see the module docstring)."""

    name = "opencode-1.18"

    def __init__(self, summary_tokens: int) -> None:
        self.summary_tokens = summary_tokens
        self.compaction = Summarise(summary_tokens, bare=True)  # its call and bookkeeping
        self.summary_text: str | None = None

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        c = self.compaction
        current = c.current(history)
        layout = await call.measure(current)
        # Its own overflow rule (``isOverflow``): the usable window, the context less the
        # output reserve (the summary's cap here), not the bench's trigger.
        usable = call.budget.window - self.summary_tokens
        if len(layout.tokens) < usable:
            return Turn(current)
        budget = min(PRESERVE_MAX, max(PRESERVE_MIN, int(usable * PRESERVE_SHARE)))
        last_user = max(i for i, m in enumerate(history) if m.get("role") == "user")
        start = min(recent_start(history, c.tail_from, budget), last_user)
        if start <= c.tail_from:
            return Turn(current)  # nothing before the kept turns: OpenCode sends as is
        request = anchored_request(transcript(history[c.tail_from : start]), self.summary_text)
        answer = await c.summarise(index, [history[0], {"role": "user", "content": request}], call)
        c.replaced += start - c.tail_from + (1 if c.summary else 0)
        self.summary_text = answer
        c.summary = {"role": "user", "content": SUMMARY_PREFIX + answer}
        c.tail_from = start
        return Turn(c.current(history), f"anchored summary of {len(layout.tokens):,} tokens")

    @property
    def evicted(self) -> int:
        return self.compaction.replaced
