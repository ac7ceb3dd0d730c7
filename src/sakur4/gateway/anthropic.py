"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: the Anthropic Messages API.

The request is translated into a chat request (:mod:`.translate`) and runs through the
same turn pipeline as ``/v1/chat/completions``: the same episodes, tiers, folds,
anchors, repairs and one receipt per turn. Only the upstream call differs, chosen
here (:func:`upstream_of`) and carried out here, one class for each way:

- ``messages`` (:class:`Forwarded`): the server serves ``/v1/messages`` itself (the
  probe found it) and has one slot. The rendered prompt goes there as an Anthropic
  body, measured as the server will convert it back
  (:func:`~sakur4.gateway.translate.as_sent`), and the answer passes through.
- ``chat`` (:class:`Translated`): otherwise (no Messages API, or several slots:
  llama.cpp drops ``id_slot`` on ``/v1/messages``, and a session must keep its slot),
  the chat answer is translated into Anthropic's message or event stream.

Either way the call goes through the pipeline's sender (its backend watch). A chat
answer comes back as values (its chunks, then the turn's outcome), which this module
turns into Anthropic's events. Errors are Anthropic-shaped (:func:`anthropic_shape`,
picked by path in the app's one error mapping): ``{"type": "error", "error": {"type",
"message"}}``; an error after the stream started is Anthropic's ``error`` event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from functools import partial
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sakur4.gateway.errors import ErrorInfo
from sakur4.gateway.serving import Routes, ServedTurn, Wire, read_body
from sakur4.gateway.translate import (
    EventsFromChat,
    as_asked,
    as_sent,
    error_body,
    message_from_chat,
    report_from_usage,
    sse,
    to_chat,
    to_messages,
)
from sakur4.harnesses import own_session
from sakur4.turns.pipeline import TurnPipeline
from sakur4.turns.prepare import Shape
from sakur4.turns.send import Streamed
from sakur4.turns.sessions import HarnessSession
from sakur4.turns.turn import Outcome, Turn

Upstream = Literal["messages", "chat"]


def upstream_of(pipeline: TurnPipeline) -> Upstream:
    """Where the gateway sends a Messages turn (see the module docstring)."""
    if pipeline.probe.messages_api and (pipeline.probe.total_slots or 1) <= 1:
        return "messages"
    return "chat"


def anthropic_shape(info: ErrorInfo) -> Mapping[str, Any]:
    """An error in the shape of Anthropic's API (its SDKs parse it into their errors)."""
    return error_body(info.status, info.message)


WIRE = Wire(
    "Messages answer",
    lambda line: line.startswith("event: message_stop"),
    lambda info: sse(anthropic_shape(info)),
    # Anthropic's own ping event (its SDKs skip it, before message_start too) while the
    # server prefills (see serving.OPEN_GRACE).
    sse({"type": "ping"}),
)


def session_header(headers: Mapping[str, str]) -> str | None:
    """The session a request names: X-Sakur4-Session, else the harness's own session id
    (Claude Code's, stable across ``--continue``, where the opening messages may not be).

    Claude Code's subagents send its session id too, and their own id in
    ``x-claude-code-agent-id`` (2.1.332, recorded in
    tests/fixtures/harnesses/claude_code_subagent.json): each is a session of its own,
    named after its parent's (``claude-<session>/agent-<agent>``). Which headers name a
    session each harness declares (sakur4.harnesses)."""
    given = headers.get("x-sakur4-session")
    if given is not None:
        return given
    name = own_session(headers)
    if name is None:
        return None
    # A side call under it (a title, no tools) is a session of its own as well
    # (sakur4.turns.sessions.HarnessSession).
    return HarnessSession(name)


async def count_tokens(routes: Routes, request: Request) -> Response:
    """The request's prompt size as the server would tokenize it, before any planning."""
    pipeline = await routes.ready()
    chat = to_chat(await read_body(request, routes.policy), count_only=True)
    layout = await pipeline.layouts.layout(chat)
    return JSONResponse({"input_tokens": len(layout.tokens)})


async def messages(routes: Routes, request: Request) -> Response:
    """One Messages turn, plain or streamed (errors raise, for the app's mapping)."""
    pipeline = await routes.ready()
    session = session_header(request.headers)  # who asks, from the headers; then what
    body = await read_body(request, routes.policy)
    project = routes.project(request)
    upstream = UPSTREAMS[upstream_of(pipeline)](pipeline)
    chat = to_chat(body)
    served = await ServedTurn.open(
        pipeline, request, body, project, session, chat=chat, shape=upstream.shape
    )
    if body.get("stream"):
        return await upstream.stream(body, served)
    return await served.answer(partial(upstream.answer, body))


class Forwarded:
    """A Messages turn sent to the server's own ``/v1/messages``: the rendered prompt as
    an Anthropic body (measured as the server converts it back), its answer passed on."""

    def __init__(self, pipeline: TurnPipeline) -> None:
        self.pipeline = pipeline
        self.shape: Shape | None = as_sent

    def _body(self, sending: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
        """The ``/v1/messages`` body for the chat request ``sending``, with the kind's own
        fields (llama.cpp: the slot the scheduler restored the session into, and
        ``cache_prompt``; llama-server's Messages route honours them). Without them a
        server of several slots could serve the turn on another slot than its state's."""
        own = self.pipeline.probe.server.request_fields(0)
        return {**to_messages(sending, body), **{k: sending[k] for k in own if k in sending}}

    async def answer(self, body: Mapping[str, Any], turn: Turn) -> Mapping[str, Any]:
        p = turn.prepared
        client = self.pipeline.client
        answer = await self.pipeline.sender.watched(
            p, lambda sending: client.messages(self._body(sending, body), p.state.route)
        )
        used = answer.get("usage") or {}
        generated = int(used.get("output_tokens") or 1)
        turn.outcome = Outcome(report_from_usage(used), generated, {"upstream": "messages"})
        return as_asked(answer, body)

    async def stream(self, body: Mapping[str, Any], served: ServedTurn) -> Response:
        p = served.turn.prepared
        sent = time.monotonic()
        client = self.pipeline.client
        return await served.stream(
            self.pipeline.sender.watched_stream(
                p, lambda sending: client.messages_stream(self._body(sending, body), p.state.route)
            ),
            partial(_forwarded, served.turn, body, sent),
            WIRE,
        )


class Translated:
    """A Messages turn sent as a chat request, its answer translated into Anthropic's
    message or events."""

    def __init__(self, pipeline: TurnPipeline) -> None:
        self.pipeline = pipeline
        self.shape: Shape | None = None

    async def answer(self, body: Mapping[str, Any], turn: Turn) -> Mapping[str, Any]:
        p = turn.prepared
        chat, outcome = await self.pipeline.sender.chat(p)
        outcome.extra["upstream"] = "chat"
        turn.outcome = outcome
        message = message_from_chat(chat, outcome.report, len(p.layout.tokens), body.get("model"))
        return as_asked(message, body)

    async def stream(self, body: Mapping[str, Any], served: ServedTurn) -> Response:
        return await served.stream(
            self.pipeline.sender.chat_stream(served.turn.prepared),
            partial(_translated, served.turn, body),
            WIRE,
        )


UPSTREAMS: dict[Upstream, type[Forwarded | Translated]] = {
    "messages": Forwarded,
    "chat": Translated,
}


async def _forwarded(
    turn: Turn, body: Mapping[str, Any], sent: float, events: AsyncIterator[str]
) -> AsyncGenerator[str, None]:
    report = None
    generated = 1
    extra: dict[str, Any] = {"upstream": "messages"}
    async for data in events:
        event = json.loads(data)
        kind = event.get("type")
        if kind == "message_start":
            if isinstance(event.get("message"), Mapping):
                event["message"] = as_asked(event["message"], body)
            report = report_from_usage((event.get("message") or {}).get("usage"))
            # The server's /v1/messages reports no prefill time (no `timings`); it
            # sends message_start with the first token, after the prompt is
            # processed: the gateway's own clock, kept apart from prefill_ms.
            extra["first_token_ms"] = round((time.monotonic() - sent) * 1000, 1)
        elif kind == "message_delta":
            generated = int((event.get("usage") or {}).get("output_tokens") or 1)
        if kind == "message_stop" and report is not None:
            turn.outcome = Outcome(report, generated, extra)
        yield sse(event)


async def _translated(
    turn: Turn, body: Mapping[str, Any], answer: AsyncIterator[Streamed]
) -> AsyncGenerator[str, None]:
    """The chat answer's chunks as Anthropic's events; at its outcome the turn's."""
    p = turn.prepared
    events = EventsFromChat(model=str(body.get("model") or ""), prompt_tokens=len(p.layout.tokens))
    for line in events.start():
        yield line
    async for piece in answer:
        if isinstance(piece, Outcome):
            events.output_tokens = piece.generated
            piece.extra["upstream"] = "chat"
            turn.outcome = piece
            for line in events.finish(piece.report):
                yield line
        else:
            for line in events.chunk(piece.payload):
                yield line
