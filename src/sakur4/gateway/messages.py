"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: the Anthropic Messages API.

The request is translated into a chat request and runs through the same turn
(:meth:`Gateway.turn`) as ``/v1/chat/completions``: the same episodes, tiers,
folds, anchors, repairs and one receipt per turn. Only the upstream call differs:

- ``messages``: the server serves ``/v1/messages`` itself (the probe found it) and
  has one slot. The rendered prompt goes there as an Anthropic body, measured as
  the server will convert it back (:func:`as_sent`), and the answer passes through.
- ``chat``: otherwise (no Messages API, or several slots: llama.cpp drops
  ``id_slot`` on ``/v1/messages``, and a session must keep its slot), the chat
  answer is translated into Anthropic's message or event stream.

Errors are Anthropic-shaped (:func:`anthropic_shape`, picked by path in the app's one
error mapping): ``{"type": "error", "error": {"type", "message"}}``; an error after the
stream started is Anthropic's ``error`` event.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Literal

import anyio
from starlette.responses import JSONResponse, Response, StreamingResponse

from sakur4.errors import Sakur4Error
from sakur4.gateway.anthropic import (
    EventsFromChat,
    as_sent,
    error_body,
    message_from_chat,
    report_from_usage,
    sse,
    to_chat,
    to_messages,
)
from sakur4.gateway.errors import ErrorInfo, classify
from sakur4.gateway.turns import Gateway, Outcome, Turn
from sakur4.store.projects import Project

Upstream = Literal["messages", "chat"]

log = logging.getLogger("sakur4.gateway")


def upstream_of(gw: Gateway) -> Upstream:
    """Where the gateway sends a Messages turn (see the module docstring)."""
    if gw.probe.messages_api and (gw.probe.total_slots or 1) <= 1:
        return "messages"
    return "chat"


def anthropic_shape(info: ErrorInfo) -> Mapping[str, Any]:
    """An error in the shape of Anthropic's API (its SDKs parse it into their errors)."""
    return error_body(info.status, info.message)


def session_header(headers: Mapping[str, str]) -> str | None:
    """The session a request names: X-Sakur4-Session, else Claude Code's own session id
    (stable across ``--continue``, where the opening messages may not be)."""
    given = headers.get("x-sakur4-session")
    if given is not None:
        return given
    claude = headers.get("x-claude-code-session-id")
    return f"claude-{claude.strip()[:120]}" if claude and claude.strip() else None


async def count_tokens(gw: Gateway, body: Any) -> JSONResponse:
    """The request's prompt size as the server would tokenize it, before any planning."""
    chat = to_chat(body, count_only=True)
    layout = await gw.layouts.layout(chat)
    return JSONResponse({"input_tokens": len(layout.tokens)})


async def messages(
    gw: Gateway, body: Any, project: Project, session: str | None, harness: str
) -> Response:
    """One Messages turn, plain or streamed (errors raise, for the app's mapping).
    ``harness``: who sent it, for the screens (:mod:`sakur4.gateway.harnesses`)."""
    upstream = upstream_of(gw)
    chat = to_chat(body)
    shape = as_sent if upstream == "messages" else None
    stack = contextlib.AsyncExitStack()
    turn = await stack.enter_async_context(
        gw.turn(chat, project, session, shape=shape, harness=harness)
    )
    headers = {
        "x-sakur4-receipt": str(turn.receipt.id),
        "x-sakur4-session": turn.prepared.state.session,
        "x-sakur4-summary": turn.receipt.summary(),
    }
    if not body.get("stream"):
        async with stack:
            answer = await _send(gw, turn, body, upstream)
        headers["x-sakur4-summary"] = turn.receipt.summary()
        return JSONResponse(answer, headers=headers)
    # The headers leave before the server has said what it reused.
    headers["x-sakur4-summary"] = turn.receipt.summary(pending=True)
    return StreamingResponse(
        _relay(gw, turn, body, upstream, stack), media_type="text/event-stream", headers=headers
    )


async def _send(gw: Gateway, turn: Turn, body: Mapping[str, Any], upstream: Upstream) -> Any:
    p = turn.prepared
    if upstream == "messages":
        async with gw.watched():
            answer = await gw.client.messages(to_messages(p.body, body), p.state.route)
        used = answer.get("usage") or {}
        generated = int(used.get("output_tokens") or 1)
        turn.outcome = Outcome(report_from_usage(used), generated, {"upstream": upstream})
        return answer
    chat, outcome = await gw.send(p)
    outcome.extra["upstream"] = upstream
    turn.outcome = outcome
    return message_from_chat(chat, outcome.report, len(p.layout.tokens), body.get("model"))


async def _relay(
    gw: Gateway,
    turn: Turn,
    body: Mapping[str, Any],
    upstream: Upstream,
    stack: contextlib.AsyncExitStack,
) -> AsyncIterator[str]:
    async def settle() -> None:
        # A client that hangs up cancels the relay; the turn must still be settled.
        with anyio.CancelScope(shield=True):
            await stack.aclose()

    try:
        events = (
            _forwarded(gw, turn, body) if upstream == "messages" else _translated(gw, turn, body)
        )
        async with contextlib.aclosing(events):
            async for line in events:
                if line.startswith("event: message_stop"):
                    # Everything the server said is in: settle the receipt before the
                    # client sees the end, so a client reading it back finds it complete.
                    await settle()
                yield line
    except Exception as e:
        # Headers are gone: the error travels as Anthropic's error event.
        info = classify(e)
        if info.status == 500 and not isinstance(e, Sakur4Error):
            log.error("unexpected error in a streamed Messages answer", exc_info=e)
        yield sse(anthropic_shape(info))
    finally:
        await settle()


async def _forwarded(gw: Gateway, turn: Turn, body: Mapping[str, Any]) -> AsyncGenerator[str, None]:
    report = None
    generated = 1
    extra: dict[str, Any] = {"upstream": "messages"}
    sent = time.monotonic()
    # Through the watch, as the chat route's calls are: a backend lost mid-answer or an
    # overflow here is noticed (issue 27: this path called the backend directly).
    request = to_messages(turn.prepared.body, body)
    route = turn.prepared.state.route
    async with gw.watched(), gw.client.messages_stream(request, route) as events:
        async for data in events:
            event = json.loads(data)
            kind = event.get("type")
            if kind == "message_start":
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
    gw: Gateway, turn: Turn, body: Mapping[str, Any]
) -> AsyncGenerator[str, None]:
    p = turn.prepared
    events = EventsFromChat(model=str(body.get("model") or ""), prompt_tokens=len(p.layout.tokens))
    async with gw.stream(p) as (lines, outcome):
        for line in events.start():
            yield line
        async for line in lines:
            if not line.startswith("data: {"):
                continue  # [DONE]
            for out in events.chunk(json.loads(line[len("data: ") :])):
                yield out
    events.output_tokens = outcome.generated
    outcome.extra["upstream"] = "chat"
    turn.outcome = outcome
    for line in events.finish(outcome.report):
        yield line
