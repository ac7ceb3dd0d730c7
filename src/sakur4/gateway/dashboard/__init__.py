"""The gateway's live dashboard: ``GET /sakur4/`` and ``GET /sakur4/api/…`` (docs/dashboard.md).

Pages (HTML rendered on the server, complete with JavaScript off):

- ``/sakur4/``: every project of the store with its sessions;
- ``/sakur4/projects/{id}/sessions/{session}``: one session's totals beside a
  drop-oldest estimate, the per-turn chart, receipts, anchors and episodes.

JSON, polled by the pages and read by the tests: ``/sakur4/api/projects`` and
``/sakur4/api/projects/{id}/sessions/{session}``, each with a ``version`` that
changes whenever what the page shows does. ``/sakur4/static/dashboard.{js,css}``
ship in the package. The routes are registered by the gateway's app behind its
exposure policy like every other route; nothing here decides who may see them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from sakur4.errors import InputError, NotFound
from sakur4.gateway.dashboard import pages, view
from sakur4.store import Store

STATIC = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}
# Pages and data change every turn: never served from a cache.
NO_STORE = {"cache-control": "no-store"}


def _project_id(request: Request) -> int:
    given = str(request.path_params["project_id"])
    if not given.isdigit() or not 0 < int(given) < 2**63:
        raise InputError(f"a project id is a positive integer, got {given!r}")
    return int(given)


class Dashboard:
    """The dashboard's handlers over the store the app holds open (``store_of``)."""

    def __init__(self, store_of: Callable[[], Store]) -> None:
        self.store_of = store_of

    async def _read(self, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        # Off the event loop: a long session's reading must not stall the proxy.
        return await anyio.to_thread.run_sync(fn, self.store_of(), *args)

    async def _session(self, request: Request) -> dict[str, Any]:
        pid = _project_id(request)
        name = str(request.path_params["session"])

        def read(store: Store) -> dict[str, Any]:
            return view.session(store, view.project_by_id(store, pid), name)

        return await self._read(read)

    async def index(self, request: Request) -> Response:
        data = await self._read(view.projects)
        return HTMLResponse(pages.index_page(data), headers=NO_STORE)

    async def session_page(self, request: Request) -> Response:
        data = await self._session(request)
        api = "/sakur4/api" + request.url.path.removeprefix("/sakur4")
        return HTMLResponse(pages.session_page(data, api), headers=NO_STORE)

    async def api_projects(self, request: Request) -> Response:
        return JSONResponse(await self._read(view.projects), headers=NO_STORE)

    async def api_session(self, request: Request) -> Response:
        return JSONResponse(await self._session(request), headers=NO_STORE)

    async def static(self, request: Request) -> Response:
        name = str(request.path_params["name"])
        if name not in STATIC:
            raise NotFound(f"no dashboard file {name!r}")
        text = files(__package__).joinpath("static", name).read_text(encoding="utf-8")
        return Response(text, media_type=STATIC[name])

    def routes(self) -> list[tuple[str, Callable[[Request], Awaitable[Response]]]]:
        """(path, handler) for the app to register, each behind its exposure policy."""
        return [
            ("/sakur4/", self.index),
            ("/sakur4/projects/{project_id}/sessions/{session:path}", self.session_page),
            ("/sakur4/api/projects", self.api_projects),
            ("/sakur4/api/projects/{project_id}/sessions/{session:path}", self.api_session),
            ("/sakur4/static/{name}", self.static),
        ]
