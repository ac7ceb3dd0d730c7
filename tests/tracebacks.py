"""No traceback in any gateway log of the test suite (issue 41), checked.

``logged`` (autouse where a conftest imports it: tests/gateway/, whose gateways run in
the test's process) holds every log record with a traceback while a test runs, and fails
the test at its teardown if one is left: a test that provokes a crash on purpose takes
it (:meth:`Logged.take`) and asserts on it. A gateway in a process of its own is checked
on its log file with :func:`traceback_in` (tests/gateway_process.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


class Logged(logging.Handler):
    """Every record with a traceback, from Sakur4's loggers and uvicorn's (which do not
    propagate to the root, so caplog would miss uvicorn's "Exception in ASGI application")."""

    NAMES = ("", "uvicorn", "uvicorn.error")

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        """The records so far, which the test expected: no longer a failure at teardown."""
        taken, self.records = self.records, []
        return taken


def traceback_in(log: str, around: int = 12) -> str | None:
    """The first traceback in a log's text, with the lines after it; None if none."""
    lines = log.splitlines()
    for n, line in enumerate(lines):
        if "Traceback" in line:
            return "\n".join(lines[max(0, n - 1) : n + around])
    return None


@pytest.fixture(autouse=True)
def logged() -> Iterator[Logged]:
    handler = Logged()
    for name in Logged.NAMES:
        logging.getLogger(name).addHandler(handler)
    try:
        yield handler
    finally:
        for name in Logged.NAMES:
            logging.getLogger(name).removeHandler(handler)
    if handler.records:
        formatter = logging.Formatter("%(name)s %(levelname)s: %(message)s")
        shown = "\n".join(formatter.format(r) for r in handler.records[:3])
        pytest.fail(f"a traceback reached the gateway's log ({len(handler.records)}):\n{shown}")
