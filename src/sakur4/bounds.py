"""The ranges every surface checks a number against: CLI options, MCP arguments, the store.

SQLite keeps an integer in 8 bytes; a larger Python int cannot even be bound (the
driver raises ``OverflowError``). So each number is checked where it enters — the
CLI's options and arguments (:func:`sakur4.cli.common.bounded`), the MCP tools'
argument fields — against one of these ranges, and the caller gets a one-line
range error naming the argument. A store call given an integer SQLite cannot hold
raises :class:`~sakur4.errors.InputError` (``sakur4.store.db``), never a traceback.
"""

from __future__ import annotations

from typing import NamedTuple

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1  # SQLite's largest INTEGER


class Range(NamedTuple):
    """Inclusive bounds of one kind of number."""

    lo: int
    hi: int


# The largest integer a JSON client in JavaScript holds exactly (its numbers are doubles).
# A tool schema that advertises more breaks such a harness: OpenCode re-sends 2**63 - 1
# as 9223372036854776000, which the gateway refuses as out of range (issue 30).
JSON_INT_MAX = 2**53 - 1

ID = Range(1, INT_MAX)  # a row id: episode, anchor, receipt
WIRE_ID = Range(1, JSON_INT_MAX)  # a row id in an MCP tool's published schema
COUNT = Range(1, INT_MAX)  # "at most this many", where the surface sets no smaller cap
PRIORITY = Range(-1000, 1000)  # an anchor's priority
RECALL_K = Range(1, 200)  # recall hits
RECEIPTS_LIMIT = Range(1, 1000)  # receipts listed at once
IMPACT_DEPTH = Range(1, 10)  # levels of referrers
MAP_BUDGET = Range(1, 100_000)  # repo map tokens
PORT = Range(0, 65535)  # 0: any free port
SLOT = Range(0, INT_MAX)  # a server slot
AGENTS = Range(1, 1024)  # agents sharing one server (the advice's slots)
