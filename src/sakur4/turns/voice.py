"""What the gateway says on its terminal: one line per turn, one per failure.

Lines go to the ``sakur4.gateway.terminal`` logger: a turn at INFO, a failure (a turn
refused or failed, the backend lost, waiting for it, a server that changed) at
WARNING. ``sakur4 gateway`` prints that logger on stderr, INFO and up, or WARNING and
up with ``-q`` (:func:`speak_on`); a gateway embedded elsewhere (tests, the demo)
says nothing unless it asks.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

from sakur4.errors import AnchorBudgetError, InputError, Sakur4Error
from sakur4.receipts import Receipt

TERMINAL = logging.getLogger("sakur4.gateway.terminal")


def speak_on(stream: TextIO | None = None, *, quiet: bool = False) -> None:
    """Print the gateway's lines on ``stream`` (stderr): turns and failures, or failures
    alone when ``quiet``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    TERMINAL.handlers = [handler]
    TERMINAL.setLevel(logging.WARNING if quiet else logging.INFO)
    TERMINAL.propagate = False


def _reuse(r: Receipt) -> str:
    if r.cache_verdict == "unverifiable" or r.server_cached is None:
        return "reuse unverifiable"
    return f"reused {r.server_cached:,}, processed {r.server_processed or 0:,}"


def turn_line(r: Receipt, seconds: float) -> str:
    """A completed turn: session, tokens of the window, verdict, reuse (and what came
    back from a slot file), time."""
    restored = r.turn_detail.parking.get("restored_tokens")
    disk = f" (restored from disk: {restored:,} tokens)" if isinstance(restored, int) else ""
    return (
        f"{r.session} turn {r.turn}: {r.prompt_tokens:,} of {r.context_window:,} tokens "
        f"({r.pressure:.0%}), {r.verdict}, {_reuse(r)}{disk}, {seconds:.1f} s"
    )


def failed_line(r: Receipt, seconds: float, error: BaseException | None) -> str:
    """A turn that was planned and sent but got no full answer."""
    why = f": {error}" if error is not None and str(error) else " (the client hung up)"
    return f"{r.session} turn {r.turn}: failed after {seconds:.1f} s{why}"


def turn(r: Receipt, started: float, error: BaseException | None = None) -> None:
    """Say how a turn ended (``started``: its :func:`time.monotonic` at arrival)."""
    seconds = time.monotonic() - started
    if r.failed:
        TERMINAL.warning("%s", failed_line(r, seconds, error))
    else:
        TERMINAL.info("%s", turn_line(r, seconds))


def not_sent(session: str, error: Sakur4Error) -> None:
    """A request that never reached the server: refused (it cannot fit, it is malformed)
    or stopped on the way (the backend was lost while it was measured)."""
    verb = "refused" if isinstance(error, InputError | AnchorBudgetError) else "not sent"
    TERMINAL.warning("%s: %s: %s", session, verb, error)


def failure(message: str) -> None:
    """Anything else that went wrong with the backend (lost, waiting, changed)."""
    TERMINAL.warning("%s", message)


def note(message: str) -> None:
    """A line worth saying that is no failure (the backend is ready)."""
    TERMINAL.info("%s", message)
