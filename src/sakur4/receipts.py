"""Receipts: one per turn, what the context engine did and what the server confirmed.

The cache verdict comes only from what the server reported: ``reused`` when it
said it reused tokens, ``full-re-prefill`` when it said it reused none, and
``unverifiable`` when it said nothing — which is counted as a full re-prefill,
never as a guess of reuse (SPEC §8).

A receipt is written before the request leaves and completed when the answer ends
(or fails): until then it is *in flight*, which the screens show apart and leave out
of every total — it is neither a re-prefill nor a reuse yet.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from sakur4.errors import InputError, NotFound
from sakur4.store import Store

CacheVerdict = Literal["reused", "full-re-prefill", "unverifiable"]


def cache_verdict(server_cached: int | None, server_processed: int | None) -> CacheVerdict:
    """Classify reuse from the server's own report; no report means unverifiable."""
    if server_cached is None or server_processed is None:
        return "unverifiable"
    return "reused" if server_cached > 0 else "full-re-prefill"


def reprefilled_tokens(r: Receipt) -> int:
    """Tokens the turn re-processed, pessimistic when the server did not say."""
    if r.cache_verdict == "unverifiable" or r.server_processed is None:
        return r.prompt_tokens
    return r.server_processed


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TurnDetail:
    """A turn receipt's detail, typed: what the screens (dashboard, ``sakur4 receipts``,
    the terminal) read. Stored as JSON (the receipt's ``detail``); the turn pipeline
    writes it (:mod:`sakur4.turns.receipt`). A key a receipt lacks reads as empty."""

    # Why the plan did what it did (a refusal: why it was refused).
    reason: str | None = None
    # Each cache-churn repair with what it spared (predicted; confirmed once answered),
    # and each change in the client's history that was not repaired.
    repairs: tuple[Mapping[str, Any], ...] = ()
    churn: tuple[Mapping[str, Any], ...] = ()
    # The server's answer never completed.
    failed: bool = False
    # The gateway's own time to the first token, where the server reported no prefill.
    first_token_ms: float | None = None
    slot: int | None = None
    harness_shape: str | None = None
    # Where a Messages turn went ("messages": forwarded; "chat": translated).
    upstream: str | None = None
    # The failed turn this one retried (its receipt id).
    retry_of: int | None = None
    # What the slot scheduler did (sakur4.turns.parking): restored, parked, failed.
    parking: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, detail: Mapping[str, Any]) -> TurnDetail:
        """The typed detail of a stored receipt's ``detail``."""
        reason = detail.get("reason")
        first = detail.get("first_token_ms")
        shape, upstream = detail.get("harness_shape"), detail.get("upstream")
        return cls(
            reason=None if reason is None else str(reason),
            repairs=tuple(x for x in detail.get("repairs") or () if isinstance(x, Mapping)),
            churn=tuple(x for x in detail.get("churn") or () if isinstance(x, Mapping)),
            failed=bool(detail.get("failed")),
            first_token_ms=first if isinstance(first, int | float) else None,
            slot=_int(detail.get("slot")),
            harness_shape=shape if isinstance(shape, str) else None,
            upstream=upstream if isinstance(upstream, str) else None,
            retry_of=_int(detail.get("retry_of")),
            parking=parking if isinstance(parking := detail.get("parking"), Mapping) else {},
        )


@dataclass(frozen=True)
class Receipt:
    project_id: int | None
    session: str
    turn: int
    context_window: int
    prompt_tokens: int
    profile: str
    profile_reason: str
    verdict: str
    cache_verdict: CacheVerdict
    steps: list[dict[str, Any]] = field(default_factory=list)
    backend: str | None = None
    requested_cut: int | None = None
    chosen_cut: int | None = None
    predicted_reuse: int | None = None
    server_cached: int | None = None
    server_processed: int | None = None
    prefill_ms: float | None = None
    divergence: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    id: int | None = None
    created_at: str | None = None
    # Read from the store: written, not yet completed (the answer is still coming).
    in_flight: bool = False

    def __post_init__(self) -> None:
        # "12,446 tokens" means nothing without "of 32,768" (design record).
        if self.context_window <= 0:
            raise InputError(f"a receipt must record its context window, got {self.context_window}")

    @property
    def pressure(self) -> float:
        return self.prompt_tokens / self.context_window

    def summary(self, *, pending: bool = False) -> str:
        """One line for a response header: tokens of window, verdict, cache.

        ``pending``: the turn is still being answered (a streamed response's headers
        leave before the server reports reuse), so the line says where the figures
        will be instead of giving a verdict that is not known yet.
        """
        if pending:
            reuse = f"reuse figures follow (receipt {self.id}, and the stream's last comment)"
        elif self.cache_verdict != "unverifiable":
            reuse = f"reused {reuse_of_prompt(self)} prompt tokens"
        else:
            reuse = "reuse unverifiable (counted as full re-prefill)"
        return (
            f"turn {self.turn}: {self.prompt_tokens:,} of {self.context_window:,} tokens "
            f"({self.pressure:.0%}), {self.profile}, {self.verdict}, {reuse}"
        )

    @property
    def turn_detail(self) -> TurnDetail:
        """The detail, typed (:class:`TurnDetail`)."""
        return TurnDetail.of(self.detail)

    @property
    def failed(self) -> bool:
        """The server's answer never completed (a timeout, a hang-up, a backend error)."""
        return self.turn_detail.failed

    @property
    def outcome(self) -> str:
        """What became of the turn, in one word: refused, in flight, failed, or the cache
        verdict of a completed turn."""
        if self.verdict == "refused":
            return "refused"
        if self.in_flight:
            return "in flight"
        if self.failed:
            return "failed"
        return self.cache_verdict

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pressure"] = round(self.pressure, 4)
        d["reprefilled"] = reprefilled_tokens(self)
        d["outcome"] = self.outcome
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Receipt:
        """The receipt :meth:`as_dict` wrote: its fields, without the figures derived from them."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_COLUMNS = (
    "project_id, session, turn, backend, context_window, prompt_tokens, pressure, profile, "
    "profile_reason, verdict, steps, requested_cut, chosen_cut, predicted_reuse, "
    "server_cached, server_processed, prefill_ms, cache_verdict, divergence, detail"
)


def write_receipt(store: Store, r: Receipt, *, completed: bool = True) -> Receipt:
    """Store ``r`` and return it with its id. ``completed=False``: the turn is still
    being answered (in flight until :func:`complete_receipt`)."""
    with store.tx() as c:
        cur = c.execute(
            f"INSERT INTO receipt ({_COLUMNS}, completed_at) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            f"CASE WHEN ? = 1 THEN {_NOW} END)",  # "= 1": PostgreSQL's CASE takes no integer
            (
                r.project_id,
                r.session,
                r.turn,
                r.backend,
                r.context_window,
                r.prompt_tokens,
                r.pressure,
                r.profile,
                r.profile_reason,
                r.verdict,
                json.dumps(r.steps),
                r.requested_cut,
                r.chosen_cut,
                r.predicted_reuse,
                r.server_cached,
                r.server_processed,
                r.prefill_ms,
                r.cache_verdict,
                r.divergence,
                json.dumps(r.detail),
                completed,
            ),
        )
        rid = cur.lastrowid
        row = c.execute("SELECT created_at FROM receipt WHERE id = ?", (rid,)).fetchone()
    return replace(r, id=rid, created_at=row[0], in_flight=not completed)


def complete_receipt(store: Store, r: Receipt) -> None:
    """Fill in what the server reported for a receipt written before the answer came."""
    if r.id is None:
        raise InputError("only a stored receipt can be completed")
    with store.tx() as c:
        complete_receipt_in(c, r)


def complete_receipt_in(c: sqlite3.Connection, r: Receipt) -> None:
    """:func:`complete_receipt` inside the caller's transaction (a gateway replica writes
    the session's state in the same one: ``turns.shared``)."""
    if r.id is None:
        raise InputError("only a stored receipt can be completed")
    c.execute(
        "UPDATE receipt SET server_cached = ?, server_processed = ?, prefill_ms = ?, "
        f"cache_verdict = ?, detail = ?, completed_at = {_NOW} WHERE id = ?",
        (
            r.server_cached,
            r.server_processed,
            r.prefill_ms,
            r.cache_verdict,
            json.dumps(r.detail),
            r.id,
        ),
    )


def list_receipts(
    store: Store, project_id: int, session: str | None = None, limit: int = 50
) -> list[Receipt]:
    """The most recent receipts of a project (optionally one session), oldest first."""
    sql = (
        f"SELECT id, created_at, completed_at IS NULL AS open, {_COLUMNS} "
        "FROM receipt WHERE project_id = ?"
    )
    params: list[Any] = [project_id]
    if session is not None:
        sql += " AND session = ?"
        params.append(session)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    rows = store.query(sql, params)
    out = [
        Receipt(
            id=r["id"],
            created_at=r["created_at"],
            project_id=r["project_id"],
            session=r["session"],
            turn=r["turn"],
            backend=r["backend"],
            context_window=r["context_window"],
            prompt_tokens=r["prompt_tokens"],
            profile=r["profile"],
            profile_reason=r["profile_reason"],
            verdict=r["verdict"],
            steps=json.loads(r["steps"]),
            requested_cut=r["requested_cut"],
            chosen_cut=r["chosen_cut"],
            predicted_reuse=r["predicted_reuse"],
            server_cached=r["server_cached"],
            server_processed=r["server_processed"],
            prefill_ms=r["prefill_ms"],
            cache_verdict=r["cache_verdict"],
            divergence=r["divergence"],
            detail=json.loads(r["detail"]),
            in_flight=bool(r["open"]),
        )
        for r in rows
    ]
    return out[::-1]


@dataclass(frozen=True)
class SessionSummary:
    """One session of a project as its receipts tell it: how many requests (one receipt
    each) and how many of them carried the user's prompt (the rest are the agent's own
    loop: a tool's result sent back), the newest one, how many were refused or failed,
    and the harness its requests came from."""

    session: str
    receipts: int
    last_turn: int
    last_at: str
    last_id: int
    context_window: int
    prompt_tokens: int
    refused: int = 0
    failed: int = 0
    last_verdict: str = "fits"
    harness: str | None = None
    prompts: int = 0


def receipt_sessions(store: Store, project_id: int) -> list[SessionSummary]:
    """The project's sessions that have receipts, the most recently active first."""
    rows = store.query(
        "SELECT r.session, n, r.turn, r.created_at, r.id, r.context_window, r.prompt_tokens, "
        "refused, failed, r.verdict, h.harness, prompts "
        "FROM receipt r JOIN (SELECT session, COUNT(*) AS n, MAX(id) AS last, "
        "SUM(verdict = 'refused') AS refused, "
        "SUM(json_extract(detail, '$.failed') IS 1) AS failed, "
        "SUM(json_extract(detail, '$.prompt') IS 1) AS prompts FROM receipt "
        "WHERE project_id = ? GROUP BY session) s ON r.id = s.last "
        "LEFT JOIN session_harness h ON h.project_id = r.project_id AND h.session = r.session "
        "ORDER BY r.id DESC",
        (project_id,),
    )
    return [SessionSummary(*tuple(row)) for row in rows]


def resolve_session(store: Store, project_id: int, given: str) -> str:
    """The session ``given`` names: its exact name, or the one session whose name starts
    with it (the tables show names shortened). Ambiguous or unknown: a clear error."""
    rows = store.query(
        "SELECT DISTINCT session FROM receipt WHERE project_id = ? "
        "AND substr(session, 1, length(?)) = ? ORDER BY session LIMIT 6",
        (project_id, given, given),
    )
    names = [r[0] for r in rows]
    if given in names or len(names) == 1:
        return given if given in names else names[0]
    if not names:
        raise NotFound(f"no session of this project starts with {given!r}")
    shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
    raise InputError(f"{given!r} starts more than one session ({shown}): give more of its name")


def record_harness(store: Store, project_id: int, session: str, harness: str) -> None:
    """Remember which harness a session's requests come from (the latest one seen)."""
    with store.tx() as c:
        c.execute(
            "INSERT INTO session_harness (project_id, session, harness) VALUES (?, ?, ?) "
            "ON CONFLICT (project_id, session) DO UPDATE SET harness = excluded.harness "
            # Qualified: PostgreSQL finds a bare "harness" ambiguous here (SQLite does not).
            "WHERE session_harness.harness != excluded.harness",
            (project_id, session, harness),
        )


# -- the table of `sakur4 receipts` (also the dashboard's) ----------------------------

# Session names are shortened to this in the table; `--session` takes any unique prefix.
SESSION_SHOWN = 12


def repairs_cell(r: Receipt) -> str:
    """Each cache-churn repair of the turn with the re-processing it spared: predicted
    from the layout, confirmed by the server's reuse (blank until it reports)."""
    shown = []
    d = r.turn_detail
    for x in d.repairs:
        saved = f"{x.get('saved_predicted', 0):,} predicted"
        if x.get("saved_confirmed") is not None:
            saved = f"{x['saved_confirmed']:,} saved ({saved})"
        shown.append(f"{x['kind']}: {saved}")
    churn = [c["kind"] for c in d.churn]
    if churn:
        shown.append("churn not repaired: " + ", ".join(churn))
    return "; ".join(shown) or "-"


def prefill_cell(r: Receipt) -> str:
    """The server's prefill time; where it reported none (llama-server's /v1/messages),
    the gateway's own time to the first token, named as such; else ``-``."""
    if r.prefill_ms is not None:
        return f"{r.prefill_ms:,.0f}"
    first = r.turn_detail.first_token_ms
    return f"{first:,.0f} to first token" if first is not None else "-"


def reuse_of_prompt(r: Receipt) -> str:
    """``9 of 3,498``: what the server reused of the prompt, by its own count (reused
    and processed); "9/3,489" beside a cache column saying "reused" read as a reuse
    (issue 41)."""
    cached, processed = r.server_cached or 0, r.server_processed or 0
    return f"{cached:,} of {cached + processed:,}"


def receipt_row(r: Receipt) -> dict[str, str]:
    """One table row; reuse the server did not report is shown as unverifiable."""
    cut = "-" if r.chosen_cut is None else f"{r.chosen_cut:,}"
    if r.requested_cut is not None and r.chosen_cut is not None:
        cut = f"{r.chosen_cut:,} (asked {r.requested_cut:,})"
    outcome = r.outcome
    if outcome in ("refused", "in flight", "failed"):
        reuse = "-"  # nothing to verify: not sent, not answered yet, never answered
    elif outcome == "unverifiable":
        reuse = "unverifiable"
    else:
        reuse = reuse_of_prompt(r)
    return {
        "session": r.session[:SESSION_SHOWN],
        "turn": str(r.turn),
        "tokens": f"{r.prompt_tokens:,} of {r.context_window:,}",
        "pressure": f"{r.pressure:.0%}",
        "profile": r.profile,
        "verdict": r.verdict,
        "cut": cut,
        "cache": outcome,
        "reused of prompt": reuse,
        "prefill ms": prefill_cell(r),
        "repairs": repairs_cell(r),
    }


RECEIPT_COLUMNS = [
    "session",
    "turn",
    "tokens",
    "pressure",
    "profile",
    "verdict",
    "cut",
    "cache",
    "reused of prompt",
    "prefill ms",
    "repairs",
]
