"""How episodes become messages: grouping, tool-call pairing, and message keys.

The grouping depends only on the sequence of episodes, never on their tiers, so
a message keeps its place while its members step down. A message's key names
the episodes it shows and at which tier; since every rendering is a pure
function of (episode, tier), equal keys mean equal bytes. The planner compares
keys with the cached layout to find where the new prompt first differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from sakur4.engine.episode import Episode
from sakur4.engine.folds import PREAMBLE, rendering
from sakur4.errors import InputError
from sakur4.vocabulary import Kind, Tier

HEAD_KEY = "head"
RIDING_KEY = "riding"


@dataclass(frozen=True, slots=True)
class Shape:
    """The message structure of a session, fixed by its episode sequence."""

    head: tuple[int, ...]
    """Indices of the leading system messages, merged into the head message."""
    starts: tuple[int, ...]
    """Every other message's first episode index, in order: a message is the
    contiguous run of episodes up to the next start."""
    group_of: tuple[int, ...]
    """Per episode, its group's index (-1 for head members)."""
    call_of: tuple[int, ...]
    """Per tool result, its call's index (-1: no call, or not a result)."""
    results_of: Mapping[int, Sequence[int]]
    """Per tool call index that has results, their indices."""
    orphans: tuple[int, ...]
    """Tool results whose call is not in the session."""

    def members(self, g: int) -> range:
        """The episode indices of message ``g``."""
        starts = self.starts
        return range(starts[g], starts[g + 1] if g + 1 < len(starts) else len(self.group_of))


def shape_of(episodes: Sequence[Episode]) -> Shape:
    """Group episodes into messages and pair tool results with their calls.

    An assistant message opens a message that the tool calls right after it join
    (one assistant message with ``tool_calls``, as clients send it); a slice that
    ``joins`` joins the message before it; every other episode is a message of its own.
    Episodes validated themselves when built.
    """
    if type(episodes) is tuple:
        return _shape_of_tuple(episodes)
    return _shape(episodes)


# A turn's plan and render (and a plan made again) group the same tuple of episodes:
# grouped once (immutable episodes in an immutable tuple: equal input, equal shape).
@lru_cache(maxsize=4)
def _shape_of_tuple(episodes: tuple[Episode, ...]) -> Shape:
    return _shape(episodes)


def _shape(episodes: Sequence[Episode]) -> Shape:
    # One pass over every episode each turn: kept to plain locals (bench/planner.py).
    message, call, result = Kind.MESSAGE, Kind.TOOL_CALL, Kind.TOOL_RESULT
    n = len(episodes)
    if len({e.id for e in episodes}) != n:
        seen: set[int] = set()
        for e in episodes:
            if e.id in seen:
                raise InputError(f"episode {e.id} appears twice")
            seen.add(e.id)
    head: list[int] = []
    starts: list[int] = []
    group_of = [-1] * n
    call_of = [-1] * n
    results: dict[int, list[int]] = {}
    orphans: list[int] = []
    call_by_id: dict[str | None, int] = {}
    first = 0
    while first < n and episodes[first].kind is message and episodes[first].role == "system":
        head.append(first)
        first += 1
    calls_join = False  # after an assistant message or a call, calls join its message
    for i in range(first, n):
        e = episodes[i]
        kind = e.kind
        if kind is call:
            call_by_id[e.tool_call_id] = i
            if not calls_join:
                starts.append(i)
                calls_join = True
        elif e.joins and kind is message and i > first and _same_message(episodes[i - 1], e):
            pass  # a slice of the message before: one message
        else:
            starts.append(i)
            if kind is result:
                c = call_by_id.get(e.tool_call_id, -1)
                call_of[i] = c
                if c >= 0:
                    results.setdefault(c, []).append(i)
                else:
                    orphans.append(i)
                calls_join = False
            else:
                calls_join = e.role == "assistant"
        group_of[i] = len(starts) - 1
    return Shape(
        tuple(head), tuple(starts), tuple(group_of), tuple(call_of), results, tuple(orphans)
    )


def _same_message(before: Episode, e: Episode) -> bool:
    return before.kind is Kind.MESSAGE and before.role == e.role


def visible_tiers(episodes: Sequence[Episode], tiers: Sequence[Tier], shape: Shape) -> list[Tier]:
    """The tier each episode renders at, with tool calls and results kept paired.

    A result shows only if its call shows (a result never appears without its
    call); a result hidden while its call shows renders as Referenced, so the call
    is never left unanswered. The planner steps a call and its results to
    Archived together, so the second rule only repairs inconsistent input.
    """
    shown = list(tiers)
    archived, referenced = Tier.ARCHIVED, Tier.REFERENCED
    for c, rs in shape.results_of.items():
        call_shown = shown[c] < archived
        for i in rs:
            if not call_shown:
                if shown[i] < archived:
                    shown[i] = archived
            elif shown[i] >= archived:
                shown[i] = referenced
    for i in shape.orphans:
        shown[i] = archived  # no call in the session: never shown alone
    return shown


_SUFFIX = {t: f".{int(t)}" for t in Tier}


def group_key(group: Sequence[int], episodes: Sequence[Episode], shown: Sequence[Tier]) -> str:
    """The key of one message: its shown members and their renderings ('' when none shows).

    Keyed by the tier whose text shows (:func:`~sakur4.engine.folds.rendering`), so
    a step that changes no bytes keeps the key and the cached message with it.
    """
    if len(group) == 1:
        i = group[0]
        t = shown[i]
        return str(episodes[i].id) + _SUFFIX[rendering(episodes[i], t)] if t.shown else ""
    return ",".join(
        str(episodes[i].id) + _SUFFIX[rendering(episodes[i], shown[i])]
        for i in group
        if shown[i].shown
    )


def head_key(
    head: Sequence[int],
    episodes: Sequence[Episode],
    shown: Sequence[Tier],
    block_ids: Sequence[int],
    block: str,
    preamble: str | None = None,
) -> str:
    """The key of the head message: its leading system episodes and its anchor block
    (and the preamble, where it is not the usual one: another text is other bytes).

    The block's anchor ids are part of it so the next plan knows which anchors
    the cached head holds (:func:`block_ids_of`); the digest catches edited text.
    """
    ids = ",".join(map(str, sorted(block_ids)))
    said = block if preamble is None or preamble == PREAMBLE else preamble + block
    return f"{HEAD_KEY}|{group_key(head, episodes, shown)}|{ids}|{_digest(said)}"


def block_ids_of(key: str) -> frozenset[int] | None:
    """The anchor ids in a cached head's block, or None if ``key`` is not a head key."""
    parts = key.split("|")
    if len(parts) != 4 or parts[0] != HEAD_KEY:
        return None
    return frozenset(int(a) for a in parts[2].split(",") if a)


def riding_key(riding: str) -> str:
    """The key of the message carrying anchors pinned since the head was cached."""
    return f"{RIDING_KEY}|{_digest(riding)}"


def _digest(text: str) -> str:
    # Anchors are keyed by their rendered bytes: an edited anchor must change the key.
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
