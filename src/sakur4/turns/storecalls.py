"""The pipeline's store calls: run off the event loop, one at a time, typed as called.

SQLite work blocks; a turn's calls run in a worker thread so other sessions' turns go
on meanwhile, and under one lock, as the store has one writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class StoreCalls:
    """Runs store functions off the event loop, one at a time."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in a worker thread, its result as ``fn`` types it."""
        async with self._lock:
            return await asyncio.to_thread(fn, *args, **kwargs)
