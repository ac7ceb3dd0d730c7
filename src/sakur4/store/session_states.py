"""Each session's planning state in the store, and the lease on it (issue 39 item 4).

Gateway replicas sharing a store serve one session's turns one at a time: a turn
claims the session's row (:func:`claim_session`), which names its gateway as the
``holder`` until ``held_until``; another gateway's turn of that session waits for it.
The turn's end writes the state and gives the lease up in one statement
(:func:`save_session_in`, inside the transaction that completes the turn's receipt),
the version counting up by one. A gateway killed mid-turn holds the session until its
lease runs out (:data:`LEASE_SECONDS` after its last renewal).

Times are Unix seconds from each gateway's clock: replicas on machines whose clocks
differ by more than a lease would take a lease over early.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from sakur4.store.db import Store

# How long a claim holds a session without renewal (a turn renews it every third).
LEASE_SECONDS = 30.0
_NOW = "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"


@dataclass(frozen=True)
class StoredSession:
    """A session's row as a claim found it: its version (0: no turn has ended) and the
    JSON of its state (None: none written yet)."""

    version: int
    state: str | None


@dataclass(frozen=True)
class HeldElsewhere:
    """The session is being served by another gateway (``holder``) for ``seconds`` more."""

    holder: str
    seconds: float


def claim_session(
    store: Store, project_id: int, session: str, holder: str, lease: float = LEASE_SECONDS
) -> StoredSession | HeldElsewhere:
    """Hold the session for ``holder`` for ``lease`` seconds and read its state; or who
    holds it now. A lease that has run out is taken over (its gateway is gone)."""
    now = time.time()
    with store.tx() as c:
        c.execute(
            "INSERT OR IGNORE INTO session_state (project_id, session) VALUES (?, ?)",
            (project_id, session),
        )
        row = c.execute(
            "SELECT version, state, holder, held_until FROM session_state "
            "WHERE project_id = ? AND session = ?",
            (project_id, session),
        ).fetchone()
        other, until = row["holder"], row["held_until"]
        if other is not None and other != holder and until is not None and until > now:
            return HeldElsewhere(str(other), until - now)
        c.execute(
            "UPDATE session_state SET holder = ?, held_until = ? "
            "WHERE project_id = ? AND session = ?",
            (holder, now + lease, project_id, session),
        )
        return StoredSession(int(row["version"]), row["state"])


def renew_session(
    store: Store, project_id: int, session: str, holder: str, lease: float = LEASE_SECONDS
) -> bool:
    """Hold the session ``lease`` seconds more; False: ``holder`` no longer holds it."""
    with store.tx() as c:
        done = c.execute(
            "UPDATE session_state SET held_until = ? "
            "WHERE project_id = ? AND session = ? AND holder = ?",
            (time.time() + lease, project_id, session, holder),
        )
        return bool(done.rowcount)


def release_session(store: Store, project_id: int, session: str, holder: str) -> None:
    """Give the lease up without writing a state (a turn refused before it was planned)."""
    with store.tx() as c:
        c.execute(
            "UPDATE session_state SET holder = NULL, held_until = NULL "
            "WHERE project_id = ? AND session = ? AND holder = ?",
            (project_id, session, holder),
        )


def save_session_in(
    c: sqlite3.Connection, project_id: int, session: str, holder: str, version: int, state: str
) -> bool:
    """Inside the caller's transaction: write the state the turn that claimed
    ``version`` ends with, as ``version + 1``, and give the lease up. False (nothing
    written): the lease was lost meanwhile (it ran out and another gateway took the
    session), so the state this gateway planned from is no longer the newest."""
    done = c.execute(
        f"UPDATE session_state SET version = version + 1, state = ?, holder = NULL, "
        f"held_until = NULL, updated_at = {_NOW} "
        "WHERE project_id = ? AND session = ? AND holder = ? AND version = ?",
        (state, project_id, session, holder, version),
    )
    return bool(done.rowcount)
