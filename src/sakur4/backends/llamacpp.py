"""The llama.cpp ``llama-server`` client (async, httpx).

Endpoints as observed on build b11434 (BACKEND-FACTS.md): ``/health``, ``/props``,
``/slots``, ``/v1/models``, ``/tokenize``, ``/apply-template``,
``/completion``, ``/v1/chat/completions`` (plain and SSE), and slot actions
(``POST /slots/{id}?action=save|restore|erase``, 501 without ``--slot-save-path``).
Request bodies are passed through untouched, so every field the server knows
works; answers come back as the decoded JSON plus a :class:`PromptReport`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from sakur4.backends.http import HttpBackend, decode_json
from sakur4.backends.report import UNREPORTED, PromptReport, read_report
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.settings import Settings

SlotAction = Literal["save", "restore", "erase"]


@dataclass(frozen=True, slots=True)
class ServerProps:
    """The parts of ``GET /props`` Sakur4 uses (``raw`` keeps the rest)."""

    n_ctx: int | None
    total_slots: int | None
    build: str | None
    model_path: str | None
    chat_template: str | None
    endpoint_slots: bool
    endpoint_metrics: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SlotState:
    """One entry of ``GET /slots``. The prompt's tokens are *not* exposed by the server."""

    id: int
    n_ctx: int | None
    is_processing: bool
    n_prompt_tokens: int | None
    n_prompt_tokens_processed: int | None
    n_prompt_tokens_cache: int | None


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


class ChatStream:
    """The events of a streaming chat answer; :attr:`report` is set by the usage chunk."""

    def __init__(self, url: str, events: AsyncIterator[str]) -> None:
        self._url = url
        self._events = events
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
                report = read_report(payload)
                if report.prompt_tokens is not None or report.verifiable:
                    self.report = report
            yield ChatChunk(data, payload)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class LlamaCppClient(HttpBackend):
    """A client for one llama-server. Every failure is a BackendError naming its URL."""

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        url: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> LlamaCppClient:
        """A client for ``url`` (else ``SAKUR4_BACKEND``) with ``SAKUR4_BACKEND_TIMEOUT``."""
        target = url or settings.backend
        if not target:
            raise SettingsError("no backend URL: pass one or set SAKUR4_BACKEND")
        return cls(target, timeout=settings.backend_timeout, transport=transport)

    def _shape(self, what: str, answer: Any, key: str) -> Any:
        if not isinstance(answer, Mapping) or key not in answer:
            shown = str(answer)[:120]
            raise BackendUnavailable(self.url, f"{what} answered without {key!r}: {shown}")
        return answer[key]

    async def health(self, *, time_limit: float | None = None) -> None:
        """Return when the server answers ``/health`` with ok (503 while loading raises)."""
        answer = await self.get_json("/health", time_limit=time_limit)
        status = answer.get("status") if isinstance(answer, Mapping) else None
        if status != "ok":
            raise BackendUnavailable(self.url, f"GET /health answered {answer!r}")

    async def props(self, *, time_limit: float | None = None) -> ServerProps:
        raw = await self.get_json("/props", time_limit=time_limit)
        if not isinstance(raw, Mapping):
            raise BackendUnavailable(self.url, f"GET /props answered {str(raw)[:80]!r}")
        gen = raw.get("default_generation_settings")
        n_ctx = _int(gen.get("n_ctx")) if isinstance(gen, Mapping) else None
        return ServerProps(
            n_ctx=n_ctx,
            total_slots=_int(raw.get("total_slots")),
            build=str(raw["build_info"]) if "build_info" in raw else None,
            model_path=str(raw["model_path"]) if "model_path" in raw else None,
            chat_template=str(raw["chat_template"]) if "chat_template" in raw else None,
            endpoint_slots=bool(raw.get("endpoint_slots", False)),
            endpoint_metrics=bool(raw.get("endpoint_metrics", False)),
            raw=raw,
        )

    async def slots(self) -> tuple[SlotState, ...]:
        raw = await self.get_json("/slots")
        if not isinstance(raw, list):
            raise BackendUnavailable(self.url, f"GET /slots answered {str(raw)[:80]!r}")
        return tuple(
            SlotState(
                id=int(s.get("id", i)),
                n_ctx=_int(s.get("n_ctx")),
                is_processing=bool(s.get("is_processing", False)),
                n_prompt_tokens=_int(s.get("n_prompt_tokens")),
                n_prompt_tokens_processed=_int(s.get("n_prompt_tokens_processed")),
                n_prompt_tokens_cache=_int(s.get("n_prompt_tokens_cache")),
            )
            for i, s in enumerate(raw)
            if isinstance(s, Mapping)
        )

    async def models(self) -> Mapping[str, Any]:
        raw = await self.get_json("/v1/models")
        self._shape("GET /v1/models", raw, "data")
        return raw  # type: ignore[no-any-return]

    async def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        """The server's own tokens for ``text`` (``add_special`` adds BOS as a prompt gets)."""
        answer = await self.post_json(
            "/tokenize", {"content": text, "add_special": add_special, "with_pieces": False}
        )
        tokens = self._shape("POST /tokenize", answer, "tokens")
        return [int(t) for t in tokens]

    async def tokenize_pieces(
        self, text: str, *, add_special: bool = False
    ) -> list[tuple[int, bytes]]:
        """Tokens with the bytes each one stands for (pieces that are not valid UTF-8
        come back from the server as byte lists)."""
        return await self._with_pieces(text, add_special)

    async def pieces_of(self, tokens: Sequence[int]) -> list[tuple[int, bytes]]:
        """The bytes of each token id in ``tokens``: ``/tokenize`` takes a list of ids as
        its content and answers each with its piece as for text (bytes, where not valid
        UTF-8, as byte lists; ``/detokenize`` would replace those with U+FFFD). The ids
        come back as the server answered them: a server that read the list another way
        answers other ids, which the caller must check."""
        return await self._with_pieces(list(tokens), False)

    async def _with_pieces(
        self, content: str | list[int], add_special: bool
    ) -> list[tuple[int, bytes]]:
        answer = await self.post_json(
            "/tokenize", {"content": content, "add_special": add_special, "with_pieces": True}
        )
        tokens = self._shape("POST /tokenize", answer, "tokens")
        try:
            return _pieces(tokens)
        except _BAD_PIECE:
            bad = next(t for t in tokens if not _is_piece(t))
            raise BackendUnavailable(self.url, f"POST /tokenize: bad token entry {bad!r}") from None

    async def apply_template(self, body: Mapping[str, Any]) -> str:
        """The prompt the server renders for a chat request body (messages, tools, kwargs)."""
        answer = await self.post_json("/apply-template", dict(body))
        return str(self._shape("POST /apply-template", answer, "prompt"))

    async def completion(self, body: Mapping[str, Any]) -> Answer:
        """``POST /completion`` (prompt as text or token ids); fields pass through."""
        answer = await self.post_json("/completion", {**body, "stream": False})
        if not isinstance(answer, Mapping):
            raise BackendUnavailable(self.url, f"POST /completion answered {str(answer)[:80]!r}")
        return Answer(answer, read_report(answer))

    async def chat(self, body: Mapping[str, Any]) -> Answer:
        """``POST /v1/chat/completions`` without streaming; all request fields pass through."""
        answer = await self.post_json("/v1/chat/completions", {**body, "stream": False})
        self._shape("POST /v1/chat/completions", answer, "choices")
        return Answer(answer, read_report(answer))

    @asynccontextmanager
    async def chat_stream(self, body: Mapping[str, Any]) -> AsyncIterator[ChatStream]:
        """``POST /v1/chat/completions`` streaming over SSE.

        ``stream_options.include_usage`` is switched on so the last chunk carries
        ``usage`` and ``timings`` (read into :attr:`ChatStream.report`); the caller's
        other stream options are kept.
        """
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        sent = {**body, "stream": True, "stream_options": options}
        async with self.sse("/v1/chat/completions", sent) as events:
            yield ChatStream(self.url, events)

    async def messages(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """``POST /v1/messages`` (the server's own Anthropic Messages API), not streaming."""
        answer = await self.post_json("/v1/messages", {**body, "stream": False})
        self._shape("POST /v1/messages", answer, "content")
        return dict(answer)

    @asynccontextmanager
    async def messages_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[str]]:
        """``POST /v1/messages`` streaming: the ``data:`` payloads up to ``message_stop``."""
        async with self.sse("/v1/messages", {**body, "stream": True}, last="message_stop") as ev:
            yield ev

    async def slot_action(
        self, slot: int, action: SlotAction, filename: str | None = None
    ) -> Mapping[str, Any]:
        """Save, restore or erase a slot's KV state (501 without ``--slot-save-path``)."""
        body = {"filename": filename} if filename is not None else {}
        answer = await self.post_json(f"/slots/{slot}", body, params={"action": action})
        if not isinstance(answer, Mapping):
            raise BackendUnavailable(self.url, f"slot {action} answered {str(answer)[:80]!r}")
        return answer


# What a malformed token entry raises in :func:`_pieces`.
_BAD_PIECE = (TypeError, KeyError, AttributeError, ValueError)


def _pieces(tokens: Any) -> list[tuple[int, bytes]]:
    """``/tokenize`` entries with pieces as (id, bytes): one comprehension, a bad entry
    found by what it raises (a checked loop was 127 ms of a 110k-token first sight,
    this 53 ms). A piece is text, or a list of bytes where it is not valid UTF-8."""
    return [
        (
            int(t["id"]),
            p.encode("utf-8") if type(p := t.get("piece", "")) is str else bytes(list(p)),
        )
        for t in tokens
    ]


def _is_piece(entry: Any) -> bool:
    try:
        _pieces([entry])
    except _BAD_PIECE:
        return False
    return True
