"""Between the store's episodes and the engine's: one message ↔ one or more engine episodes.

Both speak the same tiers and kinds (:mod:`sakur4.vocabulary`); what differs is the
shape. The store keeps one episode per message, with the original message as payload,
so a Live message goes back to the server exactly as the harness sent it. The
engine models an assistant turn as its text plus one episode per tool call (so
each result pairs with its call). An assistant message with text and calls, or
with several calls, becomes several engine episodes: the first keeps the store
id, the others get derived ids (negative, never a store id) and move with it.

What keeps its text is decided by what an episode is (its nature: the harness's
instructions and the user's requests by default), never by its role: such an
episode reaches the engine pinned. A slice of a harness message split by nature
reaches it joined to the slice before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4 import engine
from sakur4.anchors import PinnedAnchor
from sakur4.episodes import Episode as StoredEpisode
from sakur4.episodes.natures import nature_by_role
from sakur4.vocabulary import KEEP_TEXT, Kind, Nature, Tier, estimate_tokens

# Derived ids: -(store id * _PIECES + piece). A message with more pieces than this
# is refused upstream (it would be thousands of tool calls in one message).
_PIECES = 1024
# OpenAI's "developer" is its newer name for the system prompt: the engine places and
# renders it as one (llama.cpp's templates know only "system").
_ENGINE_ROLE = {"developer": "system"}


# What a stored episode's engine pieces depend on: the episode (the object: its
# ``id()``, the entry holding it alive), whether it is pinned, and (a tool result) the
# engine id of its call. Hashing each stored episode's every field was ~3% of a turn
# at 100k tokens; a stored episode is immutable and a changed one is a new object.
_Key = tuple[int, bool, tuple[int, ...]]


@dataclass(frozen=True)
class EngineView:
    """The engine's episodes for one request, and the store episode behind each."""

    episodes: tuple[engine.Episode, ...]
    store_id: Mapping[int, int]
    # Each stored episode's pieces, so the next turn builds only what is new or changed.
    pieces: Mapping[_Key, tuple[StoredEpisode, tuple[engine.Episode, ...]]] = field(
        default_factory=dict
    )


def _payload(e: StoredEpisode) -> Mapping[str, Any]:
    try:
        value = json.loads(e.payload or "{}")
    except ValueError:
        value = {}
    return value if isinstance(value, Mapping) else {}


def _piece_id(store_id: int, piece: int) -> int:
    return store_id if piece == 0 else -(store_id * _PIECES + piece)


def nature_of(e: StoredEpisode) -> Nature:
    """What a stored episode is: as classified when recorded, else by its role."""
    return e.nature or nature_by_role(e.role, e.kind)


def to_engine(
    stored: Sequence[StoredEpisode],
    pinned: frozenset[int] = frozenset(),
    previous: EngineView | None = None,
    keep: frozenset[Nature] = KEEP_TEXT,
) -> EngineView:
    """Engine episodes in prompt order, with each one's tier and size from the store.

    ``previous``, the view of the session's last turn, lends the pieces of every
    episode unchanged since (a stored episode is immutable; a tier change is a new
    one): a turn parses and checks only its new messages (at 100k tokens, building
    every piece again was 6 ms a turn). ``keep``: the natures that keep their text.
    """
    known = previous.pieces if previous is not None else {}
    built: dict[_Key, tuple[StoredEpisode, tuple[engine.Episode, ...]]] = {}
    out: list[engine.Episode] = []
    owner: dict[int, int] = {}
    call_piece: dict[str, int] = {}  # tool_call_id -> the engine id of its call
    for e in stored:
        # A result depends on its call: in the engine, the call's own piece.
        call_id = e.tool_call_id
        deps = (call_piece[call_id],) if e.role != "assistant" and call_id in call_piece else ()
        key = (id(e), e.id in pinned or nature_of(e) in keep, deps)
        lent = known.get(key)
        pieces = lent[1] if lent is not None and lent[0] is e else _pieces(e, key[1], deps)
        built[key] = (e, pieces)
        for p in pieces:
            owner[p.id] = e.id
            if p.kind is Kind.TOOL_CALL and p.tool_call_id:
                call_piece[p.tool_call_id] = p.id
        out.extend(pieces)
    return EngineView(tuple(out), owner, built)


def _pieces(e: StoredEpisode, pinned: bool, deps: tuple[int, ...]) -> tuple[engine.Episode, ...]:
    """The engine episodes of one stored episode."""
    tier = e.tier
    # Only an assistant message needs its payload (its calls): parsing every
    # payload was a per-turn cost proportional to the whole session.
    msg = _payload(e) if e.role == "assistant" else {}
    calls = msg.get("tool_calls") if e.role == "assistant" else None
    if isinstance(calls, list) and calls:
        pieces: list[engine.Episode] = []
        text = msg.get("content")
        if isinstance(text, str) and text:
            pieces.append(
                engine.Episode(
                    id=e.id,
                    role="assistant",
                    kind=Kind.MESSAGE,
                    content=text,
                    tokens=estimate_tokens(text),
                    tier=tier,
                    droppable=e.droppable,
                    pinned=pinned,
                )
            )
        for call in calls[: _PIECES - 1]:
            fn = call.get("function") if isinstance(call, Mapping) else None
            fn = fn if isinstance(fn, Mapping) else {}
            args = fn.get("arguments")
            args = args if isinstance(args, str) else json.dumps(args or {})
            pieces.append(
                engine.Episode(
                    id=_piece_id(e.id, len(pieces)),
                    role="assistant",
                    kind=Kind.TOOL_CALL,
                    content=args,
                    tokens=estimate_tokens(args),
                    tier=tier,
                    tool_name=str(fn.get("name") or ""),
                    tool_call_id=str(call.get("id") or f"call_{e.id}_{len(pieces)}"),
                    droppable=e.droppable,
                    pinned=pinned,
                )
            )
        return tuple(pieces)
    # A stored tool_call whose calls did not parse is sent as the message it is.
    kind = e.kind if e.kind in (Kind.TOOL_RESULT, Kind.NOTE) else Kind.MESSAGE
    return (
        engine.Episode(
            id=e.id,
            role=_ENGINE_ROLE.get(e.role, e.role),
            kind=kind,
            content=e.content or "",
            tokens=e.tokens,
            tier=tier,
            tool_name=e.tool_name,
            # A result's call id is stored as it came (its payload holds the same).
            tool_call_id=e.tool_call_id,
            droppable=e.droppable,
            depends_on=deps,
            pinned=pinned,
            joins=e.part > 0 and kind is Kind.MESSAGE,
        ),
    )


def store_moves(view: EngineView, moves: Mapping[int, Tier]) -> dict[int, Tier]:
    """Tier changes for the store: a message takes the most-shown tier of its pieces."""
    by_store: dict[int, Tier] = {}
    current = {e.id: e.tier for e in view.episodes}
    for eid, sid in view.store_id.items():
        tier = moves.get(eid, current[eid])
        by_store[sid] = min(by_store.get(sid, tier), tier)
    changed = {}
    for eid, sid in view.store_id.items():
        if eid in moves:
            changed[sid] = by_store[sid]
    return changed


def to_engine_anchors(pinned: Sequence[PinnedAnchor], count: Any) -> list[engine.Anchor]:
    return [
        engine.Anchor(id=a.id, text=a.text, priority=a.priority, tokens=count(a.text))
        for a in pinned
    ]
