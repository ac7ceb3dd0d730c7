"""Every log record with a traceback, for tests that assert none reached the log (the
``logged`` fixture, registered by tests/gateway/conftest.py)."""

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


@pytest.fixture
def logged() -> Iterator[Logged]:
    handler = Logged()
    for name in Logged.NAMES:
        logging.getLogger(name).addHandler(handler)
    yield handler
    for name in Logged.NAMES:
        logging.getLogger(name).removeHandler(handler)
