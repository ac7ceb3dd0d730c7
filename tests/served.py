"""Waiting until an in-process uvicorn server is done with the requests sent to it, its
log lines included, for tests that assert nothing was logged (instead of a sleep).

uvicorn serves each request in a task of its own. A crash is logged in that task
("Exception in ASGI application", in ``run_asgi``) after the answer went out, or with no
answer when the client hung up; the task leaves ``server_state.tasks`` only once it has
ended. :class:`Served` counts the requests that reached the app, so a test waits for
its own request to have arrived (a hung-up client gets no answer to wait for) and then
for no task to be left.
"""

from __future__ import annotations

import time
from typing import Any

import uvicorn


class Served:
    """Counts the HTTP requests that reach a started server's app; see :meth:`wait`.

    Installed in front of the app uvicorn loaded (``config.loaded_app``), which each
    connection accepted from then on is served by. Were that ever not so, the count
    would stay put and :meth:`wait` fail by its deadline, not pass early.
    """

    def __init__(self, server: uvicorn.Server) -> None:
        self.server = server
        self.arrived = 0
        self._app = server.config.loaded_app
        server.config.loaded_app = self

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.arrived += 1
        await self._app(scope, receive, send)

    def wait(self, arrived: int, timeout: float = 120.0) -> None:
        """Until ``arrived`` requests have reached the app in all and no request task is
        left (each has ended, whatever it logged on the way out)."""
        deadline = time.monotonic() + timeout
        while self.arrived < arrived or self.server.server_state.tasks:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"after {timeout:.0f} s the server had {self.arrived} of {arrived} "
                    f"requests and {len(self.server.server_state.tasks)} still running"
                )
            time.sleep(0.01)
