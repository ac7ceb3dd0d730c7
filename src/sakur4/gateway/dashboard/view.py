"""What the dashboard shows, read from the store as plain JSON-able values.

One reading serves both the JSON API and the HTML pages, so the page and the
endpoint the tests read cannot disagree. Every figure comes from a stored receipt
(the server's own reuse figures; ``unverifiable`` where it did not report, counted
as a full re-prefill), an episode row or an anchor row; nothing is recomputed from a
guess.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from sakur4.anchors import list_anchors
from sakur4.bounds import RECEIPTS_LIMIT
from sakur4.engine.profiles import BALANCED, CACHE_FIRST, WINDOW_FIRST
from sakur4.episodes import session_episodes
from sakur4.episodes.natures import nature_by_role
from sakur4.errors import NotFound
from sakur4.gateway.dashboard.estimate import Message as DropMessage
from sakur4.gateway.dashboard.estimate import estimate, sent_turns
from sakur4.receipts import (
    Receipt,
    list_receipts,
    receipt_row,
    receipt_sessions,
    reprefilled_tokens,
)
from sakur4.store import Store
from sakur4.store.projects import Project, list_projects

PROFILES = {p.name: p for p in (CACHE_FIRST, WINDOW_FIRST, BALANCED)}
# The chart and table show a session's most recent turns, as many as `sakur4 receipts`
# lists at once.
TURNS_SHOWN = RECEIPTS_LIMIT.hi


def session_path(project_id: int, session: str) -> str:
    return f"/sakur4/projects/{project_id}/sessions/{quote(session, safe='')}"


def fold_path(project_id: int, episode_id: int) -> str:
    return f"/sakur4/folds/{episode_id}?project={project_id}"


def _versioned(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a version: the page polls until it changes (new turn, completed
    receipt, tier moved, anchor pinned)."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return {"version": digest[:16], **data}


def project_by_id(store: Store, project_id: int) -> Project:
    for p in list_projects(store):
        if p.id == project_id:
            return p
    raise NotFound(f"no project {project_id} in this store")


def projects(store: Store) -> dict[str, Any]:
    """Every project of the store with its sessions (those that have receipts)."""
    out = []
    for p in list_projects(store):
        sessions = [
            {
                "session": s.session,
                "receipts": s.receipts,
                "prompts": s.prompts,
                "last_turn": s.last_turn,
                "last_at": s.last_at,
                "context_window": s.context_window,
                "prompt_tokens": s.prompt_tokens,
                "harness": s.harness,
                "refused": s.refused,
                "failed": s.failed,
                "last_refused": s.last_verdict == "refused",
                "page": session_path(p.id, s.session),
                "api": "/sakur4/api" + session_path(p.id, s.session).removeprefix("/sakur4"),
            }
            for s in receipt_sessions(store, p.id)
        ]
        out.append({"id": p.id, "name": p.name, "root": str(p.root), "sessions": sessions})
    return _versioned({"projects": out})


def _saved(repair: Mapping[str, Any]) -> int:
    """What a churn repair spared: the server's confirmation, else the prediction."""
    confirmed = repair.get("saved_confirmed")
    return int(confirmed if confirmed is not None else repair.get("saved_predicted") or 0)


def parking_events(parking: Mapping[str, Any]) -> list[str]:
    """What the slot scheduler did at a turn, in words (sakur4.turns.parking)."""
    out = []
    parked = parking.get("parked")
    if isinstance(parked, Mapping):
        tokens = parked.get("tokens")
        size = f" ({tokens:,} tokens)" if isinstance(tokens, int) else ""
        out.append(f"parked session {parked.get('session')}{size} to free its slot")
    if isinstance(tokens := parking.get("restored_tokens"), int):
        out.append(f"restored from disk: {tokens:,} tokens")
    said = {
        "restore_failed": "slot restore failed",
        "park_failed": "slot save failed (parking)",
        "save_failed": "slot save failed",
        "ignored": "saved state ignored",
        "unpinned": "sent unpinned",
    }
    out.extend(f"{what}: {parking[key]}" for key, what in said.items() if key in parking)
    return out


def events_of(r: Receipt) -> list[str]:
    """What changed at this turn beyond appending: cuts, early steps, refusals, client
    churn, a repair that spared re-processing, failures, a full re-prefill the server
    reported. A repair that spared nothing (Claude Code's billing header on every
    turn) changed nothing and is no event; the row's details still list it."""
    out = []
    d = r.turn_detail
    if r.verdict in ("reclaimed", "stepping"):
        cut = "" if r.chosen_cut is None else f", cut at {r.chosen_cut:,}"
        out.append(f"{r.verdict}: {len(r.steps)} steps{cut}")
    elif r.verdict == "refused":
        out.append("refused: " + (d.reason or ""))
    elif r.steps:
        out.append(f"{len(r.steps)} steps below the trigger")
    for c in d.churn:
        out.append(f"client changed earlier messages: {c.get('kind', '?')}")
    for x in d.repairs:
        if _saved(x) > 0:
            out.append(f"repaired: {x.get('kind', '?')} ({_saved(x):,} tokens spared)")
    out.extend(parking_events(d.parking))
    if r.in_flight:
        out.append("in flight: the server has not answered yet")
    elif r.failed:
        out.append("failed: the server's answer never completed")
    if r.cache_verdict == "full-re-prefill" and r.turn > 1:
        out.append("full re-prefill (the server reused nothing)")
    return out


def last_turn_state(r: Receipt) -> dict[str, Any]:
    """How the session's newest turn ended, in words: a session whose last turn was
    refused cannot go on as it is, whatever its totals say (issue 41: the page said
    "4 refused" while every turn since the first refusal had been refused)."""
    if r.in_flight:
        state, said = "in flight", "the server has not answered yet"
    elif r.verdict == "refused":
        state = "refused"
        said = (
            f"its prompt needs {r.prompt_tokens:,} tokens, the window holds "
            f"{r.context_window:,}; nothing was sent. The harness's own compaction "
            "(/compact) or a new session goes on from here"
        )
        if r.turn_detail.reason:
            said += f" ({r.turn_detail.reason})"
    elif r.failed:
        state, said = "failed", "the server's answer never completed"
    else:
        state = "answered"
        said = f"{r.prompt_tokens:,} of {r.context_window:,} tokens, {r.verdict}"
    return {"turn": r.turn, "receipt": r.id, "state": state, "said": said}


def turn_of(r: Receipt) -> dict[str, Any]:
    detail = r.turn_detail
    return {
        **r.as_dict(),
        "reason": detail.reason,
        "repairs": list(detail.repairs),
        "churn": list(detail.churn),
        "failed": detail.failed,
        # None: an older receipt that did not say.
        "compared": r.detail.get("compared"),
        "first_token_ms": detail.first_token_ms,
        "events": events_of(r),
        "row": receipt_row(r),
    }


def totals(receipts: list[Receipt]) -> dict[str, Any]:
    """The session's figures over its closed turns. A turn in flight is neither a
    re-prefill nor a reuse yet: it is counted apart (``in_flight``), never in a sum.
    Prefill time is summed where the server reported one; the turns without a figure
    are counted, so a sum over some turns never reads as all of them."""
    closed = [r for r in receipts if not r.in_flight]
    # A refused turn sent nothing: no tokens to count on either side.
    sent = [r for r in closed if r.verdict != "refused"]
    timed = [r.prefill_ms for r in sent if r.prefill_ms is not None]
    # Where the server reported no time, the gateway's own time to the first token.
    first = [
        float(ms)
        for r in sent
        if r.prefill_ms is None and (ms := r.turn_detail.first_token_ms) is not None
    ]
    return {
        # Requests (one receipt each; kept under "turns" for the API's readers), and
        # those that carried the user's prompt (issue 41: "68 turns" for 16 prompts).
        "turns": len(closed),
        "prompts": sum(r.detail.get("prompt") is True for r in closed),
        "in_flight": len(receipts) - len(closed),
        "refused": len(closed) - len(sent),
        "failed": sum(r.failed for r in sent),
        "prompt_tokens": sum(r.prompt_tokens for r in sent),
        "reprefilled": sum(reprefilled_tokens(r) for r in sent),
        "reused": sum(r.server_cached or 0 for r in sent),
        "unverifiable_turns": sum(r.cache_verdict == "unverifiable" for r in sent),
        "prefill_ms": round(sum(timed), 1) if timed else None,
        "prefill_untimed_turns": len(sent) - len(timed),
        "first_token_ms": round(sum(first), 1) if first else None,
        "first_token_turns": len(first),
    }


def session(store: Store, project: Project, name: str) -> dict[str, Any]:
    """One session: its turns (receipts), episodes, anchors, totals and the estimate."""
    receipts = list_receipts(store, project.id, session=name, limit=TURNS_SHOWN)
    if not receipts:
        raise NotFound(f"no receipts for session {name!r} in project {project.name}")
    summary = next((s for s in receipt_sessions(store, project.id) if s.session == name), None)
    last = receipts[-1]
    profile = PROFILES.get(last.profile)
    trigger = profile.trigger if profile else None
    target = profile.target if profile else None
    stored = session_episodes(store, project.id, name)
    drop = estimate(
        receipts, trigger, target, [DropMessage(e.turn, e.role, e.tokens) for e in stored]
    )
    episodes = [
        {
            "id": e.id,
            "turn": e.turn,
            "seq": e.seq,
            "role": e.role,
            "kind": e.kind,
            # What it is, which decides whether it may fold (issue 30).
            "nature": (e.nature or nature_by_role(e.role, e.kind)).value,
            "tool_name": e.tool_name,
            "tokens": e.tokens,
            "tier": e.tier.label,
            "fold": fold_path(project.id, e.id) if e.tier.folded else None,
        }
        for e in stored
    ]
    anchors = [
        {"id": a.id, "text": a.text, "priority": a.priority, "session": a.session}
        for a in list_anchors(store, project.id, name)
    ]
    return _versioned(
        {
            "project": {"id": project.id, "name": project.name, "root": str(project.root)},
            "session": name,
            "harness": summary.harness if summary else None,
            "context_window": last.context_window,
            "profile": {"name": last.profile, "trigger": trigger, "target": target},
            "turns": [turn_of(r) for r in receipts],
            "last_turn": last_turn_state(last),
            "episodes": episodes,
            "anchors": anchors,
            "totals": totals(receipts),
            "drop_oldest_estimate": {
                "reprefilled": drop.reprefilled,
                "sakur4_reprefilled": sum(reprefilled_tokens(r) for r in sent_turns(receipts)),
                "truncations": drop.truncations,
                "note": drop.why,
            },
        }
    )
