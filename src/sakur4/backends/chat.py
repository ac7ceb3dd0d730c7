"""What every OpenAI-compatible server shares: chat (plain and SSE), the Anthropic
Messages route where the server has one, the model list, and the answers' shapes.

Request bodies are passed through untouched, so every field the server knows works;
answers come back as the decoded JSON plus a :class:`PromptReport` (llama.cpp's
``timings`` or OpenAI ``usage.prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self

import httpx

from sakur4.backends.http import HttpBackend, decode_json
from sakur4.backends.report import UNREPORTED, PromptReport, read_report
from sakur4.backends.routing import Route
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.settings import Settings


@dataclass(frozen=True, slots=True)
class Answer:
    """A non-streaming answer: the server's JSON unchanged, and what it did with the prompt."""

    json: Mapping[str, Any]
    report: PromptReport


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One SSE event of a streaming chat answer: its JSON text (to pass on as is) and payload."""

    data: str
    payload: Mapping[str, Any]


# Reads what the server says it did with a prompt out of an answer (or a stream chunk).
ReportReader = Callable[[Mapping[str, Any]], PromptReport]
# Told each answer's report with the request it answered (estimated layouts calibrate on it).
ReportObserver = Callable[[Mapping[str, Any], PromptReport], None]


class ChatStream:
    """The events of a streaming chat answer; :attr:`report` is set by the usage chunk."""

    def __init__(
        self,
        url: str,
        events: AsyncIterator[str],
        read: ReportReader = read_report,
        done: Callable[[PromptReport], None] | None = None,
    ) -> None:
        self._url = url
        self._events = events
        self._read = read
        self._done = done
        self.report: PromptReport = UNREPORTED

    def __aiter__(self) -> AsyncIterator[ChatChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[ChatChunk]:
        async for data in self._events:
            payload = decode_json(self._url, "POST /v1/chat/completions (stream)", data)
            if not isinstance(payload, Mapping):
                what = "POST /v1/chat/completions (stream)"
                shown = data[:80]
                raise BackendUnavailable(self._url, f"{what} sent a non-object event: {shown!r}")
            if "usage" in payload or "timings" in payload:
                report = self._read(payload)
                if report.prompt_tokens is not None or report.verifiable:
                    self.report = report
            yield ChatChunk(data, payload)
        if self._done is not None:
            self._done(self.report)


class ChatClient(HttpBackend):
    """A client for one OpenAI-compatible server. Every failure is a BackendError naming
    its URL."""

    # Set by the layouts that learn from the server's counts (estimated layouts).
    observer: ReportObserver | None = None

    def read_report(self, answer: Mapping[str, Any]) -> PromptReport:
        """This server's prompt report in an answer (a kind whose fields say otherwise
        than their OpenAI meaning reads them its own way)."""
        return read_report(answer)

    def _observed(self, body: Mapping[str, Any]) -> Callable[[PromptReport], None] | None:
        observer = self.observer
        if observer is None:
            return None
        return lambda report: observer(body, report)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        url: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        through: HttpBackend | None = None,
    ) -> Self:
        """A client for ``url`` (else ``SAKUR4_BACKEND``) with ``SAKUR4_BACKEND_TIMEOUT``
        (``through``: the client of that server whose connection it speaks through)."""
        target = url or settings.backend
        if not target:
            raise SettingsError("no backend URL: pass one or set SAKUR4_BACKEND")
        return cls(target, timeout=settings.backend_timeout, transport=transport, through=through)

    def _shape(self, what: str, answer: Any, key: str) -> Any:
        if not isinstance(answer, Mapping) or key not in answer:
            shown = str(answer)[:120]
            raise BackendUnavailable(self.url, f"{what} answered without {key!r}: {shown}")
        return answer[key]

    async def models(self) -> Mapping[str, Any]:
        raw = await self.get_json("/v1/models")
        self._shape("GET /v1/models", raw, "data")
        return raw  # type: ignore[no-any-return]

    async def chat(self, body: Mapping[str, Any], route: Route | None = None) -> Answer:
        """``POST /v1/chat/completions`` without streaming; all request fields pass through
        (``route``: the session's routing key and affinity, for a router in front)."""
        answer = await self.post_json(
            "/v1/chat/completions",
            {**body, "stream": False},
            headers=route.headers() if route else None,
            seen=route.learn if route else None,
        )
        self._shape("POST /v1/chat/completions", answer, "choices")
        report = self.read_report(answer)
        if self.observer is not None:
            self.observer(body, report)
        return Answer(answer, report)

    @asynccontextmanager
    async def chat_stream(
        self, body: Mapping[str, Any], route: Route | None = None
    ) -> AsyncIterator[ChatStream]:
        """``POST /v1/chat/completions`` streaming over SSE.

        ``stream_options.include_usage`` is switched on so the last chunk carries
        ``usage`` and ``timings`` (read into :attr:`ChatStream.report`); the caller's
        other stream options are kept.
        """
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        sent = {**body, "stream": True, "stream_options": options}
        async with self.sse(
            "/v1/chat/completions",
            sent,
            headers=route.headers() if route else None,
            seen=route.learn if route else None,
        ) as events:
            yield ChatStream(self.url, events, self.read_report, self._observed(body))

    async def messages(
        self, body: Mapping[str, Any], route: Route | None = None
    ) -> Mapping[str, Any]:
        """``POST /v1/messages`` (the server's own Anthropic Messages API), not streaming."""
        answer = await self.post_json(
            "/v1/messages",
            {**body, "stream": False},
            headers=route.headers() if route else None,
            seen=route.learn if route else None,
        )
        self._shape("POST /v1/messages", answer, "content")
        return dict(answer)

    @asynccontextmanager
    async def messages_stream(
        self, body: Mapping[str, Any], route: Route | None = None
    ) -> AsyncIterator[AsyncIterator[str]]:
        """``POST /v1/messages`` streaming: the ``data:`` payloads up to ``message_stop``."""
        async with self.sse(
            "/v1/messages",
            {**body, "stream": True},
            last="message_stop",
            headers=route.headers() if route else None,
            seen=route.learn if route else None,
        ) as ev:
            yield ev
