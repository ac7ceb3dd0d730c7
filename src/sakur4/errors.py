"""The one exception tree of Sakur4.

Third-party errors (sqlite, httpx, tree-sitter) are converted where they enter,
with ``raise ... from e``; each surface maps this tree once (CLI: one line and an
exit code; MCP: a tool error result; gateway: an OpenAI-shaped JSON error).

    Sakur4Error
    ├── SettingsError            a setting has a value that cannot be used
    ├── InputError               a caller sent something malformed or out of bounds
    │   ├── PathOutsideProject   a path (or symlink) leads outside the project root
    │   ├── TooLarge             a request holds more than a stated bound allows
    │   └── PromptTooLong        the current turn cannot fit the window, all steps taken
    ├── NotFound                 a project, symbol, episode or receipt does not exist
    ├── StoreError               the SQLite store cannot be used
    │   ├── StoreCorrupt         not a database, or fails its integrity check
    │   ├── StoreNewerSchema     written by a newer Sakur4 than this one
    │   ├── StoreUnavailable     missing, locked, read-only, or the disk is full
    │   └── AccessRefused        the database role may not reach these rows
    ├── LedgerError              the Symbolic Ledger refused a request
    ├── AtlasAnchorError         an Atlas entry has no valid Ledger anchor
    ├── AnchorBudgetError        pinned anchors alone do not fit the budget
    └── BackendError             the inference server failed or refused
        ├── BackendUnavailable   down, timed out, 5xx, malformed or cut-off answer
        └── BackendRefused       a definite "no": 4xx, 501 not supported
            └── ContextOverflow  the prompt exceeds the server's context window
"""

from __future__ import annotations


class Sakur4Error(Exception):
    """Base of every error Sakur4 raises on purpose."""


class SettingsError(Sakur4Error):
    """A setting has a value that cannot be used."""


class InputError(Sakur4Error):
    """A caller sent something malformed or out of bounds."""


class PathOutsideProject(InputError):
    """A path, or a symlink it goes through, leads outside the project root."""


class TooLarge(InputError):
    """A request holds more than a stated bound allows (the message names the bound)."""


OVERFLOW_ADVICE = (
    "Start a new session, compact this one (/compact), send fewer or smaller "
    "attachments, or give the server a larger window (-c)."
)


class PromptTooLong(InputError):
    """The prompt cannot fit the window after every step the gateway can take.

    Worded as the harnesses read an overflow, so they compact instead of retrying:
    Anthropic's ``prompt is too long: N tokens > M maximum`` (Claude Code) and
    ``exceeds the context window`` (OpenCode's overflow patterns). Then what would not
    fit (``why``, in figures) and what the user can do, each said once.
    """

    def __init__(self, needed: int, window: int, why: str) -> None:
        super().__init__(
            f"prompt is too long: {needed} tokens > {window} maximum: it exceeds the "
            f"context window {why}. {OVERFLOW_ADVICE}"
        )
        self.needed = needed
        self.window = window


class NotFound(Sakur4Error):
    """A project, symbol, episode or receipt that was asked for does not exist."""


class StoreError(Sakur4Error):
    """The SQLite store cannot be used."""


class StoreCorrupt(StoreError):
    """The store file is not a SQLite database or fails its integrity check."""


class StoreNewerSchema(StoreError):
    """The store was migrated by a newer Sakur4 than this one."""


class StoreUnavailable(StoreError):
    """The store is missing, locked, read-only, or its disk is full."""


class SessionHeld(StoreUnavailable):
    """Another gateway sharing the store is serving the session's turn (issue 39 item 4)."""

    def __init__(self, session: str, holder: str, seconds: float) -> None:
        super().__init__(
            f"session {session} is being served by another gateway ({holder}) for up to "
            f"{seconds:.0f} s more; send the turn again when it has answered"
        )


class AccessRefused(StoreError):
    """The store's database role may not reach these rows: another project's, which
    were not granted to it, or the owner's alone to change (PostgreSQL row-level
    security and privileges, issue 39 item 3)."""


class LedgerError(Sakur4Error):
    """The Symbolic Ledger refused a request."""


class AtlasAnchorError(Sakur4Error):
    """An Atlas entry does not anchor to a current Ledger fact."""


class AnchorBudgetError(Sakur4Error):
    """Pinned anchors alone need more tokens than the budget allows."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(
            f"pinned anchors need {needed} tokens but the budget is {budget}; "
            f"unpin or shorten anchors (short by {needed - budget})"
        )
        self.needed = needed
        self.budget = budget


class BackendError(Sakur4Error):
    """The inference server failed or refused; the message names the backend."""

    def __init__(self, backend: str, what: str, status: int | None = None) -> None:
        super().__init__(f"backend {backend}: {what}")
        self.backend = backend
        self.what = what
        self.status = status


class BackendUnavailable(BackendError):
    """The backend is down, timed out, answered 5xx, or sent a malformed answer."""


class SlotBusy(BackendError):
    """The slot a probe's cache experiment would run on is serving a request."""


class BackendRefused(BackendError):
    """The backend gave a definite refusal (4xx, or 501 not supported)."""


class ContextOverflow(BackendRefused):
    """The prompt exceeds the backend's context window."""
