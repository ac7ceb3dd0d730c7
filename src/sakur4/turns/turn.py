"""A turn's records, as it moves through the pipeline: named, prepared, open, answered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sakur4 import engine
from sakur4.backends.layout import TokenLayout
from sakur4.backends.report import UNREPORTED, PromptReport
from sakur4.harnesses.base import GENERIC
from sakur4.receipts import Receipt
from sakur4.store.projects import Project
from sakur4.turns.adapter import EngineView
from sakur4.turns.churn import Change
from sakur4.turns.sessions import FailedTurn, SessionState


@dataclass(frozen=True)
class Named:
    """A request checked whole, and the session it belongs to."""

    body: dict[str, Any]
    # The messages as they came (a retry repeats exactly these), and without the
    # billing header (what is repaired, recorded and sent).
    request: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    header: str | None
    session: str
    # A harness's compaction served from the cached prompt (sakur4.harnesses.compaction).
    served: dict[str, Any] | None = None


@dataclass(frozen=True)
class Prepared:
    """A planned turn, ready to send."""

    state: SessionState
    project: Project
    body: dict[str, Any]
    plan: engine.Plan
    view: EngineView
    rendered: engine.RenderedPrompt
    layout: TokenLayout
    divergence: int | None
    # The messages as recorded (after repairs): what the next turn is compared with.
    harness: tuple[dict[str, Any], ...] = ()
    changes: tuple[Change, ...] = ()
    # Claude Code's billing header, dropped from the system prompt (None: there was none).
    header: str | None = None
    # The episodes recorded (each message, or its parts when split by nature) and the
    # stored id of each.
    ids: tuple[int, ...] = ()
    recorded: tuple[dict[str, Any], ...] = ()
    # The harness shape the parts were classified by (sakur4.episodes.natures).
    shape: str = GENERIC
    # The request's messages as they came, and the failed turn this one retries.
    request: tuple[dict[str, Any], ...] = ()
    retry: FailedTurn | None = None
    served: dict[str, Any] | None = None  # as in Named


@dataclass
class Outcome:
    """What a sent turn produced, for the receipt."""

    report: PromptReport = UNREPORTED
    generated: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """An open turn: planned, its receipt stored, the session held until the turn closes.

    The route sends it through the pipeline and sets :attr:`outcome` once the server
    has answered in full; a turn that closes without one is recorded as failed.
    """

    prepared: Prepared
    receipt: Receipt
    outcome: Outcome | None = None
