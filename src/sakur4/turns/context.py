"""What the turn pipeline's parts share, in one object.

The watch, the preparer, the slot scheduler and the sender each need the settings,
the store and its calls, the backend's client and the sessions' book: one
:class:`TurnContext` is made per pipeline (:class:`~sakur4.turns.pipeline.TurnPipeline`)
and handed to each, instead of each constructor taking the same five things.
"""

from __future__ import annotations

from dataclasses import dataclass

from sakur4.backends.seam import Backend
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.turns.sessions import SessionBook
from sakur4.turns.shared import SharedSessions
from sakur4.turns.storecalls import StoreCalls


@dataclass(frozen=True, slots=True)
class TurnContext:
    """One pipeline's shared parts: its settings, its store (called through ``calls``,
    off the event loop, one at a time), the client of its backend, and what each
    session and slot holds."""

    settings: Settings
    store: Store
    client: Backend
    calls: StoreCalls
    sessions: SessionBook
    # Sessions shared with other gateways through the store (None: this gateway's own).
    shared: SharedSessions | None = None

    @classmethod
    def open(cls, settings: Settings, store: Store, client: Backend) -> TurnContext:
        """A new pipeline's context: no store call running, no session known yet."""
        calls, sessions = StoreCalls(), SessionBook(settings.routing_headers)
        shared = SharedSessions(store, calls, sessions) if settings.shared_sessions else None
        return cls(settings, store, client, calls, sessions, shared)
