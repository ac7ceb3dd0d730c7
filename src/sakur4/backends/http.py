"""The HTTP layer every backend client shares: one place where transport faults and
error answers become :class:`~sakur4.errors.BackendError`.

Every error names the backend URL and what failed (method, path, cause), and falls
on one side of the line callers care about: :class:`BackendUnavailable` (down,
timed out, 5xx, malformed or cut-off answer: try again later) or
:class:`BackendRefused` (a definite "no": 4xx, 501 not supported; retrying the same
request will not help). The transport can be injected, so faults are staged in
tests without patching anything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Self

import httpx

from sakur4.errors import BackendError, BackendRefused, BackendUnavailable, ContextOverflow

# Connecting should be quick even when prefill is slow: a dead port fails fast.
CONNECT_TIMEOUT = 10.0
# Told an answer's headers (a router's affinity cookie is kept from them).
HeadersSeen = Callable[[httpx.Headers], None]


def normalize_url(url: str) -> str:
    """The server root: no trailing slash, and no ``/v1`` (OpenAI base URLs often carry it)."""
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    if not u.startswith(("http://", "https://")):
        u = "http://" + u
    return u


def _error_fields(body: Any) -> tuple[str, str]:
    """(type, message) from an OpenAI/llama.cpp ``{"error": {...}}`` or FastAPI ``{"detail"}``."""
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping):
            return str(err.get("type", "")), str(err.get("message", ""))
        if isinstance(err, str):
            return "", err
        detail = body.get("detail")
        if detail is not None:
            return "", str(detail)
    return "", ""


def status_error(url: str, what: str, status: int, body: Any, text: str) -> BackendError:
    """Map an error status (with its decoded body, if any) to the error tree."""
    kind, message = _error_fields(body)
    message = message or text.strip()[:300] or "(no body)"
    said = f"{what} answered HTTP {status}" + (f" {kind}" if kind else "") + f": {message}"
    if kind == "exceed_context_size_error":
        return ContextOverflow(url, said, status)
    if status == 501 or 400 <= status < 500:
        return BackendRefused(url, said, status)
    return BackendUnavailable(url, said, status)


def transport_error(url: str, what: str, e: httpx.HTTPError, timeout: float) -> BackendError:
    """Map an httpx transport failure (no usable HTTP answer) to BackendUnavailable."""
    if isinstance(e, httpx.ConnectTimeout):
        why = f"could not connect within {CONNECT_TIMEOUT:g}s"
    elif isinstance(e, httpx.TimeoutException):
        why = f"timed out after {timeout:g}s (SAKUR4_BACKEND_TIMEOUT)"
    elif isinstance(e, httpx.ConnectError):
        why = f"cannot connect ({e or 'connection refused'}); is the server running?"
    elif isinstance(e, httpx.RemoteProtocolError):
        why = f"the connection closed before the answer was complete ({e})"
    else:
        why = f"{type(e).__name__}: {e}"
    return BackendUnavailable(url, f"{what} failed: {why}")


def decode_json(url: str, what: str, text: str) -> Any:
    """Parse a JSON answer; malformed or truncated JSON is the backend's fault."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        shown = text[:120] + ("…" if len(text) > 120 else "")
        raise BackendUnavailable(
            url, f"{what} sent malformed JSON ({e.msg} at char {e.pos}): {shown!r}"
        ) from e


class HttpBackend:
    """An async HTTP client bound to one backend URL, mapping every failure once."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        through: HttpBackend | None = None,
    ) -> None:
        """``headers``: sent with every request (the probe's own route, for a router).
        ``through``: the client of this server whose connection this one speaks through
        (one client per server owns its transport, as httpx has it: closing this one
        closes nothing; the owner closes it)."""
        self.url = normalize_url(url)
        self.timeout = timeout
        self._headers = dict(headers or {})
        self._owner = through is None
        if through is not None:
            if transport is not None or through.url != self.url:
                raise ValueError(f"{self.url} cannot speak through {through.url}'s client")
            self._http: httpx.AsyncClient = through._http
            return
        self._http = httpx.AsyncClient(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            transport=transport,
            # No shared cookie jar: a router's affinity cookie belongs to one session
            # (backends/routing.py keeps it per session), never to every request.
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owner:
            await self._http.aclose()

    def _sent_with(self, headers: Mapping[str, str] | None) -> dict[str, str] | None:
        """This client's own headers, then the request's."""
        return {**self._headers, **headers} if headers else (self._headers or None)

    async def reach(self, *, time_limit: float) -> None:
        """Return once anything answers HTTP at the URL (any status, any body): a server
        that is up, whatever it turns out to be; else BackendUnavailable saying why."""
        limit = httpx.Timeout(time_limit, connect=min(time_limit, CONNECT_TIMEOUT))
        try:
            await self._http.get("/", timeout=limit, headers=self._sent_with(None))
        except httpx.HTTPError as e:
            raise transport_error(self.url, "GET /", e, time_limit) from e

    async def request_text(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        time_limit: float | None = None,
        headers: Mapping[str, str] | None = None,
        seen: HeadersSeen | None = None,
    ) -> str:
        """Send a request and return its body's text; every failure is a BackendError.
        ``headers`` go with it; ``seen`` is told the answer's headers."""
        what = f"{method} {path}"
        limit = self.timeout if time_limit is None else time_limit
        try:
            r = await self._http.request(
                method,
                path,
                json=body,
                params=params,
                headers=self._sent_with(headers),
                timeout=httpx.Timeout(limit, connect=min(limit, CONNECT_TIMEOUT)),
            )
            text = r.text
            if seen is not None:
                seen(r.headers)
        except httpx.HTTPError as e:
            raise transport_error(self.url, what, e, limit) from e
        if r.status_code >= 400:
            try:
                decoded: Any = json.loads(text)
            except ValueError:
                decoded = None
            raise status_error(self.url, what, r.status_code, decoded, text)
        return text

    async def request_json(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        time_limit: float | None = None,
        headers: Mapping[str, str] | None = None,
        seen: HeadersSeen | None = None,
    ) -> Any:
        """Send a request and return its decoded JSON; every failure is a BackendError."""
        text = await self.request_text(
            method, path, body, params=params, time_limit=time_limit, headers=headers, seen=seen
        )
        return decode_json(self.url, f"{method} {path}", text)

    async def get_json(self, path: str, *, time_limit: float | None = None) -> Any:
        return await self.request_json("GET", path, time_limit=time_limit)

    async def post_json(
        self,
        path: str,
        body: Any,
        *,
        params: Mapping[str, str] | None = None,
        time_limit: float | None = None,
        headers: Mapping[str, str] | None = None,
        seen: HeadersSeen | None = None,
    ) -> Any:
        return await self.request_json(
            "POST", path, body, params=params, time_limit=time_limit, headers=headers, seen=seen
        )

    @asynccontextmanager
    async def sse(
        self,
        path: str,
        body: Any,
        last: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        seen: HeadersSeen | None = None,
    ) -> AsyncIterator[AsyncIterator[str]]:
        """POST and yield the ``data:`` payloads of a server-sent-event stream.

        The stream must end with ``data: [DONE]`` (or with the event named ``last``,
        which is yielded: Anthropic's streams end on ``message_stop``); ending without
        it (the server died, or a proxy cut the connection) raises BackendUnavailable,
        as does an ``{"error": ...}`` (or ``event: error``) event mid-stream.
        """
        what = f"POST {path} (stream)"
        try:
            async with self._http.stream(
                "POST", path, json=body, headers=self._sent_with(headers)
            ) as r:
                if seen is not None:
                    seen(r.headers)
                if r.status_code >= 400:
                    text = (await r.aread()).decode("utf-8", "replace")
                    try:
                        decoded: Any = json.loads(text)
                    except ValueError:
                        decoded = None
                    raise status_error(self.url, what, r.status_code, decoded, text)
                yield self._events(r, what, last)
        except httpx.HTTPError as e:
            raise transport_error(self.url, what, e, self.timeout) from e

    async def _events(
        self, r: httpx.Response, what: str, last: str | None = None
    ) -> AsyncIterator[str]:
        seen = 0
        event = None
        try:
            async for line in r.aiter_lines():
                if line.startswith("event:"):
                    event = line[len("event:") :].strip()
                    continue
                if not line.startswith("data:"):
                    continue  # blank separators, comments (": ping")
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                if data.startswith('{"error"') or event == "error":
                    decoded = decode_json(self.url, what, data)
                    err = decoded.get("error") if isinstance(decoded, dict) else None
                    code = err.get("code") if isinstance(err, dict) else None
                    status = code if isinstance(code, int) and code >= 400 else 500
                    where = f"{what} mid-stream after {seen} events"
                    raise status_error(self.url, where, status, decoded, data)
                seen += 1
                yield data
                if last is not None and event == last:
                    return
        except httpx.HTTPError as e:
            raise transport_error(self.url, f"{what} after {seen} events", e, self.timeout) from e
        raise BackendUnavailable(
            self.url, f"{what} ended after {seen} events without [DONE]: the stream was cut"
        )
