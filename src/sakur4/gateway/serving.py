"""Serving one turn over HTTP, the same for every wire API: the request's body read
strictly, the turn opened, the ``X-Sakur4-*`` headers, the settle, streamed errors.

A wire module (:mod:`.openai`, :mod:`.anthropic`) translates; this holds what both
must do the same way:

- the receipt, session and summary headers (a streamed answer's summary is
  ``pending``: the headers leave before the server has said what it reused);
- the turn settled (its receipt completed, its session released) before the client
  sees the end of the answer, and settled, shielded, however the answer ends (a
  client that hangs up cancels the relay);
- an error after the headers left, sent as the stream's last event in the wire's
  shape; an unexpected one logged once;
- a streamed answer started, and kept alive, while the upstream is still opening
  (:data:`OPEN_GRACE`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from sakur4.errors import InputError, Sakur4Error
from sakur4.exposure import ExposurePolicy
from sakur4.gateway.errors import ErrorInfo, Refused, classify
from sakur4.gateway.harnesses import harness_of
from sakur4.store.projects import Project
from sakur4.turns.pipeline import TurnPipeline
from sakur4.turns.prepare import Shape
from sakur4.turns.turn import Turn

log = logging.getLogger("sakur4.gateway")

# A streamed answer is never silent for long: a harness hangs up on a silent connection
# (Claude Code's byte watchdog: 180 s, its first-byte one on the headers; OpenCode's
# header timeout: 300 s), and a CPU server prefills a harness's first prompt (Claude
# Code's: 15-22k tokens at 20-40 tokens/s) for minutes. An upstream not open after
# OPEN_GRACE s (a server that answers after its prefill, or queues the request) gets the
# answer started anyway (200, the headers); any wait for the upstream's next line past
# KEEPALIVE_EVERY s (llama-server sends its headers at once, then nothing until the
# prefill is done) gets the wire's keep-alive. Within the grace an error keeps its status.
OPEN_GRACE = 5.0
KEEPALIVE_EVERY = 5.0

# SQLite's INTEGER: an id outside it names nothing (and the driver would overflow).
MAX_ID = 2**63 - 1

T = TypeVar("T")

# A \uD800-\uDFFF escape: only these can make json.loads return text that is not UTF-8.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _no_constant(name: str) -> Any:
    raise InputError(f"the request body holds {name}, which is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise InputError(f"the number {text[:40]} in the request body is out of range")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)
    if not -MAX_ID - 1 <= value <= MAX_ID:
        raise InputError(
            f"the integer {text[:40]}{'...' if len(text) > 40 else ''} in the request body "
            "is out of range (a 64-bit integer at most)"
        )
    return value


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8 text, no NaN or Infinity, numbers that fit what they are sent to."""
    try:
        # Strict UTF-8: json.loads(bytes) would let encoded surrogates (b"\xed\xa0\x80") in.
        value = json.loads(
            raw.decode("utf-8-sig"),
            parse_constant=_no_constant,
            parse_float=_finite,
            parse_int=_bounded_int,
        )
        if _SURROGATE_ESCAPE.search(raw):
            # Found by fuzzing: "\ud800" parses to a str that cannot be encoded again,
            # and failed later (storing, hashing, forwarding) as a bare 500.
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError as e:
        raise InputError(
            "the request body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff "
            "without its pair), which is not text"
        ) from e
    except UnicodeDecodeError as e:
        raise InputError(f"the request body is not UTF-8: {e.reason}") from e
    except json.JSONDecodeError as e:
        raise InputError(f"the request body is not valid JSON: {e.msg} at char {e.pos}") from e
    except RecursionError as e:  # found by fuzzing: '[' * 100_000 was a bare 500
        raise InputError("the request body is JSON nested too deeply to parse") from e
    except ValueError as e:  # int() past Python's digit limit
        raise InputError(f"the request body holds a number out of range: {e}") from e


async def read_body(request: Request, policy: ExposurePolicy) -> Any:
    """The request's JSON body, read whole and no larger than the policy allows."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > policy.max_body:
                raise Refused(policy.too_large())
            chunks.append(chunk)
    except ClientDisconnect as e:
        # Found by fuzzing: a client that hung up mid-body was logged as "Exception in
        # ASGI application" with a traceback. It is gone; the answer goes nowhere.
        raise InputError("the client hung up before its request body was complete") from e
    return parse_json(b"".join(chunks))


@dataclass(frozen=True)
class Routes:
    """What a wire route needs of the app: the pipeline once the backend is linked, the
    project a request names, and the exposure policy its body is read under."""

    ready: Callable[[], Awaitable[TurnPipeline]]
    project: Callable[[Request], Project]
    policy: ExposurePolicy


@dataclass(frozen=True)
class Wire:
    """How one wire API streams: the line that ends an answer (the turn is settled
    before it goes out), an error as its last event, what keeps a stream alive while
    the upstream opens (its clients skip it), and what the log calls it."""

    answer: str
    is_end: Callable[[str], bool]
    error_event: Callable[[ErrorInfo], str]
    keep_alive: str
    # An SSE comment with the settled receipt's summary before the end (clients skip it).
    summary_comment: bool = False


class ServedTurn:
    """One open turn served over HTTP (see the module docstring)."""

    def __init__(self, stack: contextlib.AsyncExitStack, turn: Turn) -> None:
        self.stack = stack
        self.turn = turn

    @classmethod
    async def open(
        cls,
        pipeline: TurnPipeline,
        request: Request,
        body: Any,
        project: Project,
        session: str | None,
        *,
        chat: Any = None,
        shape: Shape | None = None,
    ) -> ServedTurn:
        """Plan the turn and store its receipt; the session is held until it settles.

        ``chat``: the request as a chat request, when the wire API is another (``body``
        as it came names the harness); ``shape``: the request as the server will see it.
        """
        harness = harness_of(request.headers, body)
        stack = contextlib.AsyncExitStack()
        turn = await stack.enter_async_context(
            pipeline.turn(
                body if chat is None else chat, project, session, shape=shape, harness=harness
            )
        )
        return cls(stack, turn)

    def headers(self, *, pending: bool) -> dict[str, str]:
        """The turn's receipt, session and summary (``pending``: no figures from the
        server yet, only where they will be; never a verdict, issue 15, row 18)."""
        return {
            "x-sakur4-receipt": str(self.turn.receipt.id),
            "x-sakur4-session": self.turn.prepared.state.session,
            "x-sakur4-summary": self.turn.receipt.summary(pending=pending),
        }

    async def answer(self, send: Callable[[Turn], Awaitable[Mapping[str, Any]]]) -> Response:
        """A plain answer: sent, the turn settled, then the answer with its headers."""
        async with self.stack:
            answer = await send(self.turn)
        return JSONResponse(dict(answer), headers=self.headers(pending=False))

    async def _enter(self, context: AbstractAsyncContextManager[T]) -> T:
        """Open ``context`` (an upstream stream) for as long as the turn: a failure to open
        it closes the turn without an outcome (failed) and raises."""
        try:
            return await self.stack.enter_async_context(context)
        except BaseException as e:
            with anyio.CancelScope(shield=True):  # the turn is told why (the terminal says it)
                await self.stack.__aexit__(type(e), e, e.__traceback__)
            raise

    async def settle(self) -> None:
        """Close the turn (its receipt and the session's lock), whatever cancels the caller."""
        with anyio.CancelScope(shield=True):
            await self.stack.aclose()

    async def stream(
        self,
        upstream: AbstractAsyncContextManager[T],
        relay: Callable[[T], AsyncGenerator[str, None]],
        wire: Wire,
    ) -> Response:
        """A streamed answer: ``relay`` of ``upstream`` once it is open, kept alive (see
        :data:`OPEN_GRACE`). An upstream that fails to open within the grace raises,
        before any header."""
        opening = asyncio.ensure_future(self._enter(upstream))
        try:
            await asyncio.wait({opening}, timeout=OPEN_GRACE)
        except BaseException:  # the client hung up
            await self._abandon(opening)
            raise
        lines = relay(opening.result()) if opening.done() else self._once_open(opening, relay)
        return self._relayed(_kept_alive(lines, wire), wire)

    async def _once_open(
        self, opening: asyncio.Future[T], relay: Callable[[T], AsyncGenerator[str, None]]
    ) -> AsyncGenerator[str, None]:
        """``relay`` of the upstream once it opens (a failure raises: the stream's last
        event); the open cancelled if the client hangs up before."""
        try:
            opened = await asyncio.shield(opening)
        except asyncio.CancelledError:
            await self._abandon(opening)
            raise
        lines = relay(opened)
        async with contextlib.aclosing(lines):
            async for line in lines:
                yield line

    async def _abandon(self, opening: asyncio.Future[Any]) -> None:
        """Cancel an upstream still opening and settle the turn."""
        opening.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({opening})
        if not opening.cancelled():
            opening.exception()  # retrieved: the client it was for is gone
        await self.settle()

    def _relayed(self, lines: AsyncGenerator[str, None], wire: Wire) -> Response:
        """A streamed answer: ``lines`` relayed, the turn settled before the end goes out,
        an error after the headers sent as the last event."""
        headers = self.headers(pending=True)

        async def relay() -> AsyncIterator[str]:
            try:
                async with contextlib.aclosing(lines):
                    async for line in lines:
                        if wire.is_end(line):
                            # Everything the server said is in: complete the receipt
                            # before the client sees the end, so a client that reads it
                            # back next (or hangs up at once) finds the turn settled.
                            await self.settle()
                            if wire.summary_comment:
                                yield f": x-sakur4-summary {self.turn.receipt.summary()}\n\n"
                        yield line
            except Exception as e:
                # Headers are gone: the error travels as a last event.
                info = classify(e)
                if info.status == 500 and not isinstance(e, Sakur4Error):
                    log.error("unexpected error in a streamed %s", wire.answer, exc_info=e)
                yield wire.error_event(info)
            finally:
                await self.settle()

        return StreamingResponse(relay(), media_type="text/event-stream", headers=headers)


async def _next(lines: AsyncGenerator[str, None]) -> str | None:
    try:
        return await anext(lines)
    except StopAsyncIteration:
        return None


async def _kept_alive(lines: AsyncGenerator[str, None], wire: Wire) -> AsyncGenerator[str, None]:
    """``lines``, with the wire's keep-alive whenever the next one is KEEPALIVE_EVERY s
    away (each next line is awaited in a task of its own, cancelled if the client goes)."""
    async with contextlib.aclosing(lines):
        while True:
            following = asyncio.ensure_future(_next(lines))
            try:
                while not following.done():
                    await asyncio.wait({following}, timeout=KEEPALIVE_EVERY)
                    if not following.done():
                        yield wire.keep_alive
            finally:
                if not following.done():  # the client hung up
                    following.cancel()
                    with anyio.CancelScope(shield=True):
                        await asyncio.wait({following})
                    if not following.cancelled():
                        following.exception()  # retrieved: the client it was for is gone
            line = following.result()
            if line is None:
                return
            yield line
