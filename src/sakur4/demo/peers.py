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
"""

from __future__ import annotations

import unicodedata

from sakur4.demo.direct import Call, Message, Summarise, Turn

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
    """Claude Code's clear-old-tool-results, then auto-compact (module docstring)."""

    name = "claude-code"

    def __init__(self, summary_tokens: int) -> None:
        self.compaction = Summarise(summary_tokens, trigger=CLAUDE_AUTOCOMPACT)
        self.cleared: set[int] = set()

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        threshold = int(call.budget.window * CLAUDE_AUTOCOMPACT)
        shown = _cleared(history, self.cleared)
        current = self.compaction.current(shown)
        event = None
        if len((await call.measure(current)).tokens) >= threshold:
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
