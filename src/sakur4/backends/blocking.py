"""Run a backend coroutine from synchronous code (the CLI, doctor, fixtures)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result.

    ``asyncio.run`` refuses to run inside a running event loop (doctor may be called
    from an async MCP handler); there the coroutine runs on a fresh loop in a worker
    thread instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
