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
from typing import Any
from urllib.parse import quote

from sakur4.anchors import list_anchors
from sakur4.bounds import RECEIPTS_LIMIT
from sakur4.engine.profiles import BALANCED, CACHE_FIRST, WINDOW_FIRST
from sakur4.episodes import session_episodes
from sakur4.errors import NotFound
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
                "last_turn": s.last_turn,
                "last_at": s.last_at,
                "context_window": s.context_window,
                "prompt_tokens": s.prompt_tokens,
                "page": session_path(p.id, s.session),
                "api": "/sakur4/api" + session_path(p.id, s.session).removeprefix("/sakur4"),
            }
            for s in receipt_sessions(store, p.id)
        ]
        out.append({"id": p.id, "name": p.name, "root": str(p.root), "sessions": sessions})
    return _versioned({"projects": out})


def events_of(r: Receipt) -> list[str]:
    """What happened at this turn beyond appending: cuts, early steps, refusals,
    client churn, failures, a full re-prefill the server reported."""
    out = []
    if r.verdict in ("reclaimed", "stepping"):
        cut = "" if r.chosen_cut is None else f", cut at {r.chosen_cut:,}"
        out.append(f"{r.verdict}: {len(r.steps)} steps{cut}")
    elif r.verdict == "refused":
        out.append("refused: " + str(r.detail.get("reason", "")))
    elif r.steps:
        out.append(f"{len(r.steps)} steps below the trigger")
    for c in r.detail.get("churn", []):
        out.append(f"client changed earlier messages: {c.get('kind', '?')}")
    for x in r.detail.get("repairs", []):
        out.append(f"repaired: {x.get('kind', '?')}")
    if r.detail.get("failed"):
        out.append("failed: the server's answer never completed")
    if r.cache_verdict == "full-re-prefill" and r.turn > 1:
        out.append("full re-prefill (the server reused nothing)")
    return out


def turn_of(r: Receipt) -> dict[str, Any]:
    d = r.as_dict()
    return {
        **d,
        "reason": r.detail.get("reason"),
        "repairs": r.detail.get("repairs", []),
        "churn": r.detail.get("churn", []),
        "failed": bool(r.detail.get("failed")),
        "events": events_of(r),
        "row": receipt_row(r),
    }


def totals(receipts: list[Receipt]) -> dict[str, Any]:
    return {
        "turns": len(receipts),
        "prompt_tokens": sum(r.prompt_tokens for r in receipts),
        "reprefilled": sum(reprefilled_tokens(r) for r in receipts),
        "reused": sum(r.server_cached or 0 for r in receipts),
        "unverifiable_turns": sum(r.cache_verdict == "unverifiable" for r in receipts),
        "prefill_ms": round(sum(r.prefill_ms or 0.0 for r in receipts), 1),
    }


def session(store: Store, project: Project, name: str) -> dict[str, Any]:
    """One session: its turns (receipts), episodes, anchors, totals and the estimate."""
    receipts = list_receipts(store, project.id, session=name, limit=TURNS_SHOWN)
    if not receipts:
        raise NotFound(f"no receipts for session {name!r} in project {project.name}")
    last = receipts[-1]
    profile = PROFILES.get(last.profile)
    trigger = profile.trigger if profile else None
    target = profile.target if profile else None
    drop = estimate(receipts, trigger, target)
    episodes = [
        {
            "id": e.id,
            "turn": e.turn,
            "seq": e.seq,
            "role": e.role,
            "kind": e.kind,
            "tool_name": e.tool_name,
            "tokens": e.tokens,
            "tier": e.tier.label,
            "fold": fold_path(project.id, e.id) if e.tier.folded else None,
        }
        for e in session_episodes(store, project.id, name)
    ]
    anchors = [
        {"id": a.id, "text": a.text, "priority": a.priority, "session": a.session}
        for a in list_anchors(store, project.id, name)
    ]
    return _versioned(
        {
            "project": {"id": project.id, "name": project.name, "root": str(project.root)},
            "session": name,
            "context_window": last.context_window,
            "profile": {"name": last.profile, "trigger": trigger, "target": target},
            "turns": [turn_of(r) for r in receipts],
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
