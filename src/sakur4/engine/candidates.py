"""What may step this turn: protection, one-rung candidates, and the final rung's gate.

Protected, never stepped: pinned episodes, the harness's leading system prompt,
the current turn (the latest user message, and whatever the assistant has not
answered since), and (the quality dial) the newest answered tool results with
their calls. A user message left unanswered *before* the latest one is a turn
that failed (no answer came; OpenCode drops the failed answer and resends the
rest): it and what it followed are history like any other, or a session whose
turns timed out pins ever more of the window until nothing can fit (issue 31).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sakur4.engine.episode import Episode
from sakur4.engine.folds import rendering
from sakur4.engine.messages import Shape
from sakur4.engine.tiers import Held, Step, refusal
from sakur4.vocabulary import Kind, Tier

_MESSAGE, _CALL, _RESULT = Kind.MESSAGE, Kind.TOOL_CALL, Kind.TOOL_RESULT
NEXT = {t: Tier(min(t + 1, Tier.DROPPED)) for t in Tier}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A one-rung step: one episode, or a tool call leaving with its results.

    ``changes``: whether the step changes the prompt's bytes. One that does not
    (a rendering no longer than its text stays the text) costs nothing anywhere.
    """

    pos: int  # where the message it changes starts
    members: tuple[int, ...]
    befores: tuple[int, ...]
    afters: tuple[int, ...]
    tool: bool
    changes: bool = True
    # Where the step goes: None, one rung down; a removal on a shifting server takes
    # its members straight to Archived (engine.removal).
    to: Tier | None = None

    @property
    def delta(self) -> int:
        """Tokens the step saves now (never negative by construction of renderings,
        but estimates of two texts can disagree by a token)."""
        return sum(self.befores) - sum(self.afters)


class Scan:
    """Candidates pulled so far, latest first, with their running positive gain."""

    def __init__(self, source: Iterator[Candidate]) -> None:
        self.source = source
        self.items: list[Candidate] = []
        self._neg_pos: list[int] = []  # -pos, ascending, for bisect
        self._gains = [0]  # positive gain of items[:k]
        self.exhausted = False

    @property
    def gained(self) -> int:
        return self._gains[-1]

    def pull(self) -> Candidate | None:
        c = None if self.exhausted else next(self.source, None)
        if c is None:
            self.exhausted = True
            return None
        self.items.append(c)
        self._neg_pos.append(-c.pos)
        self._gains.append(self._gains[-1] + max(c.delta, 0))
        return c

    def until(self, pos: int) -> None:
        """Pull until every candidate at or after ``pos`` is in."""
        while (not self.items or self.items[-1].pos >= pos) and self.pull() is not None:
            pass

    def gain(self, pos: int) -> int:
        """Positive gain of the candidates at or after ``pos`` (after :meth:`until`)."""
        return self._gains[bisect_right(self._neg_pos, -pos)]

    def after(self, pos: int) -> list[Candidate]:
        """The candidates at or after ``pos`` (after :meth:`until`)."""
        return self.items[: bisect_right(self._neg_pos, -pos)]


def protected(episodes: Sequence[Episode], shape: Shape, live_results: int) -> set[int]:
    """Indices that never step, found from the tail back (pinned is checked per step)."""
    keep = set(shape.head)
    last_assistant = last_user = -1
    # Where the user messages after the last answer start (a slice that joins the one
    # before is part of its message, not a message of its own): the latest, the first.
    latest_start = first_user = -1
    results: list[int] = []
    for i in range(len(episodes) - 1, -1, -1):
        e = episodes[i]
        kind = e.kind
        if kind is _CALL or (kind is _MESSAGE and e.role == "assistant"):
            if last_assistant < 0:
                last_assistant = i
        elif kind is _MESSAGE and e.role == "user":
            if last_user < 0:
                last_user = i
            if last_assistant < 0 and not e.joins:
                first_user = i
                if latest_start < 0:
                    latest_start = i
        elif kind is _RESULT and len(results) < live_results and i < last_assistant:
            results.append(i)
        if last_assistant >= 0 and last_user >= 0 and len(results) >= live_results:
            break
    if last_user >= 0:
        keep.add(last_user)
    # Not answered yet: not read yet. But a user message the assistant never answered
    # before the latest one is a turn that failed, and so is what it followed: the
    # current turn starts at the latest user message. (Results right before a single
    # user message stay: Claude Code sends a reminder with its tool results.)
    current = latest_start if 0 <= first_user < latest_start else last_assistant + 1
    keep.update(range(current, len(episodes)))
    keep.update(results)
    for i in [i for i in keep if shape.call_of[i] >= 0]:
        keep.add(shape.call_of[i])  # a kept result keeps its call: the pair stays readable
    return keep


def unread_attachments(episodes: Sequence[Episode], keep: set[int]) -> set[int]:
    """The protected user content that may fold when the turn cannot fit otherwise: the
    parts of user messages kept only because the model has not read them yet and not
    pinned — a file attached to the request, a pasted file. The user's own words and
    the harness's instructions are pinned (kept by what they are), so they stay.

    Kept whole, a turn whose attachments outgrow the window was refused, and so was
    every turn after it that carried them (issue 41: Claude Code's ``@``-attached files
    made 20,530 tokens at 8,192; its compaction and each ``--continue`` were refused).
    """
    return {
        i
        for i in keep
        if episodes[i].kind is _MESSAGE and episodes[i].role == "user" and not episodes[i].pinned
    }


def candidates(
    episodes: Sequence[Episode],
    shape: Shape,
    tiers: Sequence[Tier],
    shown: Sequence[Tier],
    group_start: Sequence[int],
    size: Callable[[int, Tier], int],
    keep: set[int],
) -> Iterator[Candidate]:
    """Every one-rung step, latest message first (lazy: most turns need only the tail)."""
    for i in range(len(episodes) - 1, -1, -1):
        t = tiers[i]
        if t >= Tier.ARCHIVED or i in keep:
            continue
        e = episodes[i]
        if e.pinned or shown[i] is not t:
            continue  # pinned, or rendered otherwise (a repaired pair): leave it
        # Below Archived, so the step is to Archived at most: never refused (only
        # Dropped's gate refuses, :func:`drops`); not asked per episode per turn.
        nxt = NEXT[t]
        pos = group_start[shape.group_of[i]]
        tool = e.kind is _CALL or e.kind is _RESULT
        if nxt is not Tier.ARCHIVED or not tool:
            before = size(i, t)
            if rendering(e, nxt) is rendering(e, t):  # the same bytes: nothing moves
                yield Candidate(pos, (i,), (before,), (before,), tool, changes=False)
            else:
                yield Candidate(pos, (i,), (before,), (size(i, nxt),), tool)
        elif e.kind is _CALL:
            # A call and its results leave the prompt together, or not at all.
            rest = shape.results_of.get(i, ())
            if all(j not in keep and not episodes[j].pinned and tiers[j] >= t for j in rest):
                unit = (i, *(j for j in rest if tiers[j] is Tier.REFERENCED))
                befores = tuple(size(j, Tier.REFERENCED) for j in unit)
                yield Candidate(pos, unit, befores, (0,) * len(unit), True)


def drops(
    episodes: Sequence[Episode], shape: Shape, tiers: Sequence[Tier], keep: set[int]
) -> tuple[list[Step], list[Held]]:
    """Archived → Dropped, behind the final rung's gate; free, the prompt shows neither."""
    ready = [
        i
        for i, e in enumerate(episodes)
        if e.droppable and tiers[i] is Tier.ARCHIVED and i not in keep and not e.pinned
    ]
    if not ready:
        return [], []
    needed: set[int] = set()
    for i, e in enumerate(episodes):
        if tiers[i] is Tier.LIVE:
            needed.update(e.depends_on)
            c = shape.call_of[i]
            if c >= 0:
                needed.add(episodes[c].id)
    steps: list[Step] = []
    held: list[Held] = []
    for i in ready:
        e = episodes[i]
        why = refusal(Tier.DROPPED, droppable=True, live_dependent=e.id in needed)
        if why is None:
            steps.append(Step(e.id, Tier.ARCHIVED, Tier.DROPPED, 0, 0))
        else:
            held.append(Held(e.id, Tier.ARCHIVED, why))
    return steps, held
