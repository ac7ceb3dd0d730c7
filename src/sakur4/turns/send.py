"""A prepared turn sent: every call the pipeline makes to the backend, through its watch.

What comes back is typed, never framed: a plain answer and its :class:`Outcome`, or a
stream of :class:`ChatChunk` values (each a piece of the answer, its JSON as the server
wrote it) ended by the turn's :class:`Outcome`. The wire modules above frame them
(server-sent events, keep-alives, the end marker, Anthropic's events). A route that
calls the backend another way (the Anthropic route forwards to the server's own
Messages API) makes its call through :meth:`Sender.watched` and
:meth:`Sender.watched_stream`, so a server lost or shrunk is noticed the same way.
Every call takes its slot first (:class:`~sakur4.turns.parking.SlotScheduler`): the
body sent is the one it gives, pinned to the slot the session's state is in.

A failure is raised, not yielded (:class:`~sakur4.errors.BackendUnavailable` for a
server lost mid-answer): the surface above turns it into its wire's last event.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from sakur4.backends.chat import ChatChunk
from sakur4.errors import BackendUnavailable
from sakur4.turns.context import TurnContext
from sakur4.turns.parking import SlotScheduler
from sakur4.turns.turn import Outcome, Prepared
from sakur4.turns.watch import BackendWatch

T = TypeVar("T")

# What a streamed chat turn yields: the answer's pieces as they come, its outcome last.
Streamed = ChatChunk | Outcome


class Sender:
    """Sends prepared turns to the backend, each call watched (:class:`BackendWatch`)."""

    def __init__(self, ctx: TurnContext, watch: BackendWatch, scheduler: SlotScheduler) -> None:
        self.client = ctx.client
        self.watch = watch
        self.scheduler = scheduler

    async def chat(self, p: Prepared) -> tuple[Mapping[str, Any], Outcome]:
        """The server's chat answer and the turn's outcome."""
        answer = await self.watched(p, lambda body: self.client.chat(body, p.state.route))
        usage = answer.json.get("usage")
        generated = usage.get("completion_tokens", 1) if isinstance(usage, Mapping) else 1
        return answer.json, Outcome(answer.report, int(generated or 1))

    @contextlib.asynccontextmanager
    async def chat_stream(self, p: Prepared) -> AsyncIterator[AsyncIterator[Streamed]]:
        """The answer's chunks as the server sends them, then the turn's outcome (the
        server's report and the tokens it generated), once everything it said is in."""
        async with self.watch.watching():
            body = await self.scheduler.take(p)
        async with self.watch.watching(), self.client.chat_stream(body, p.state.route) as events:

            async def answer() -> AsyncIterator[Streamed]:
                generated = 1
                async for chunk in self._read(events):
                    usage = chunk.payload.get("usage")
                    if isinstance(usage, Mapping):
                        generated = int(usage.get("completion_tokens") or 1)
                    yield chunk
                yield Outcome(events.report, generated)

            yield answer()

    async def watched(self, p: Prepared, call: Callable[[dict[str, Any]], Awaitable[T]]) -> T:
        """``call``'s answer from the backend for the body ``p`` is sent with, watched
        while it runs."""
        async with self.watch.watching():
            body = await self.scheduler.take(p)
            return await call(body)

    @contextlib.asynccontextmanager
    async def watched_stream(
        self,
        p: Prepared,
        opening: Callable[[dict[str, Any]], AbstractAsyncContextManager[AsyncIterable[T]]],
    ) -> AsyncIterator[AsyncIterator[T]]:
        """A stream from the backend, ``opening`` the body ``p`` is sent with, opened and
        read through the watch."""
        async with self.watch.watching():
            body = await self.scheduler.take(p)
        async with self.watch.watching(), opening(body) as items:
            yield self._read(items)

    async def _read(self, items: AsyncIterable[T]) -> AsyncIterator[T]:
        # Read outside the watching block (the gateway reads on while it keeps the
        # client's stream alive): a backend lost mid-answer is noticed here.
        try:
            async for item in items:
                yield item
        except BackendUnavailable as e:
            self.watch.backend_lost(e)
            raise
