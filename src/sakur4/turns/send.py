"""A prepared turn sent: every call the pipeline makes to the backend, through its watch.

The chat API plain or streamed, and the Anthropic Messages API where the server serves
it and the route forwards a turn there; each answer's figures go into the outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sakur4.backends.seam import Backend
from sakur4.errors import BackendUnavailable
from sakur4.turns.turn import Outcome, Prepared
from sakur4.turns.watch import BackendWatch

DONE = "data: [DONE]\n\n"


class Sender:
    """Sends prepared turns to the backend, each call watched (:class:`BackendWatch`)."""

    def __init__(self, client: Backend, watch: BackendWatch) -> None:
        self.client = client
        self.watch = watch

    async def chat(self, p: Prepared) -> tuple[Mapping[str, Any], Outcome]:
        """The server's chat answer and the turn's outcome."""
        async with self.watch.watching():
            answer = await self.client.chat(p.body, p.state.route)
        usage = answer.json.get("usage")
        generated = usage.get("completion_tokens", 1) if isinstance(usage, Mapping) else 1
        return answer.json, Outcome(answer.report, int(generated or 1))

    @contextlib.asynccontextmanager
    async def chat_stream(self, p: Prepared) -> AsyncIterator[tuple[AsyncIterator[str], Outcome]]:
        """The SSE lines to pass on, and the outcome filled in as the stream ends."""
        outcome = Outcome()
        wants_usage = bool((p.body.get("stream_options") or {}).get("include_usage"))
        async with (
            self.watch.watching(),
            self.client.chat_stream(p.body, p.state.route) as events,
        ):

            async def lines() -> AsyncIterator[str]:
                try:
                    async for chunk in events:
                        payload = chunk.payload
                        usage = payload.get("usage")
                        if isinstance(usage, Mapping):
                            outcome.generated = int(usage.get("completion_tokens") or 1)
                        choices = payload.get("choices")
                        if not wants_usage and not choices and "usage" in payload:
                            continue  # the client did not ask for the usage chunk
                        yield f"data: {chunk.data}\n\n"
                except BackendUnavailable as e:
                    self.watch.backend_lost(e)  # cut off mid-answer
                    raise
                outcome.report = events.report
                yield DONE

            yield lines(), outcome

    async def messages(self, p: Prepared, request: Mapping[str, Any]) -> Mapping[str, Any]:
        """The server's own ``/v1/messages`` answer to ``request`` (turn ``p`` forwarded)."""
        async with self.watch.watching():
            return await self.client.messages(request, p.state.route)

    @contextlib.asynccontextmanager
    async def messages_stream(
        self, p: Prepared, request: Mapping[str, Any]
    ) -> AsyncIterator[AsyncIterator[str]]:
        """The server's own ``/v1/messages`` event stream for ``request`` (turn ``p``
        forwarded), each event's
        data: a backend lost mid-answer or an overflow here is noticed as on the chat
        path (issue 27: the forwarded path called the backend directly)."""
        route = p.state.route
        async with self.watch.watching(), self.client.messages_stream(request, route) as events:

            async def watched() -> AsyncIterator[str]:
                # Read outside this block (the gateway reads on while it keeps the client's
                # stream alive): a backend lost mid-answer is noticed here, as in lines().
                try:
                    async for data in events:
                        yield data
                except BackendUnavailable as e:
                    self.watch.backend_lost(e)
                    raise

            yield watched()
