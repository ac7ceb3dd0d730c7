"""The turnstile: on one stdio connection, requests take effect in arrival order.

The SDK reads stdin in one loop and spawns a task per request, so two requests
may run at once and finish in either order — the protocol allows it. A harness
that sends ``remember`` and then ``recall`` without waiting for the first answer
still expects the recall to see the note (SPEC §9).

Each tool call gets a :class:`Ticket` in the stdio read loop, in arrival order
(:mod:`sakur4.mcp.stdio` stamps it on the message as the transport's request
context); other requests (ping, tools/list) touch no store and carry none, so
they are answered while a long write runs. The :func:`gate` middleware, the
outermost one, holds a ticketed request until its turn:

- a write (a tool that changes the store) waits for every earlier request;
- anything else waits for every earlier write, and may overlap other reads.

That is exactly "in arrival order" as an observer can tell: no request sees a
write that arrived after it, and every request sees each write that arrived
before it. HTTP has no arrival order to keep: its requests carry no ticket and
pass the gate untouched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.types import RequestId

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Ticket:
    """One request's place in the arrival order."""

    seq: int
    request_id: RequestId
    writes: bool
    # Set by the gate when the request reaches it; a ticket the gate never saw
    # (the SDK refused the request before middleware) is released on its answer.
    claimed: bool = False
    released: bool = False


@dataclass
class Turnstile:
    """Arrival order for one connection: tickets in, turns out, releases back."""

    _next_seq: int = 0
    # Open tickets by sequence number; dicts keep insertion order, which is seq order.
    _open: dict[int, Ticket] = field(default_factory=dict)
    _changed: anyio.Event | None = None

    def admit(self, request_id: RequestId, *, writes: bool) -> Ticket:
        """Give the request that just arrived the next place. Called in arrival order."""
        ticket = Ticket(self._next_seq, request_id, writes)
        self._next_seq += 1
        self._open[ticket.seq] = ticket
        return ticket

    def is_turn(self, ticket: Ticket) -> bool:
        """Whether every earlier request this one must follow has finished."""
        for seq, earlier in self._open.items():
            if seq >= ticket.seq:
                return True
            if ticket.writes or earlier.writes:
                return False
        return True

    async def wait_turn(self, ticket: Ticket) -> None:
        while not self.is_turn(ticket):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def release(self, ticket: Ticket) -> None:
        """The request has taken effect (or failed): later ones may go. Idempotent."""
        if ticket.released:
            return
        ticket.released = True
        del self._open[ticket.seq]
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def settle_answered(self, request_id: RequestId) -> None:
        """A response for ``request_id`` went out: release its ticket if the gate never saw it.

        The SDK answers some requests before any middleware runs (a request from the
        wrong protocol era, for one); without this their tickets would block every
        later request forever.
        """
        for ticket in self._open.values():
            if ticket.request_id == request_id and not ticket.claimed:
                log.debug("request %r was answered before the gate; releasing it", request_id)
                self.release(ticket)
                return


async def gate(ctx: ServerRequestContext, call_next: CallNext) -> HandlerResult:
    """Server middleware: hold a ticketed request until its turn, release it when done."""
    ticket = ctx.request
    if not isinstance(ticket, TicketContext):
        return await call_next(ctx)
    ticket.ticket.claimed = True
    try:
        await ticket.turnstile.wait_turn(ticket.ticket)
        return await call_next(ctx)
    finally:
        ticket.turnstile.release(ticket.ticket)


@dataclass(frozen=True)
class TicketContext:
    """The stdio transport's request context: the ticket and the turnstile it belongs to."""

    turnstile: Turnstile
    ticket: Ticket

    async def release_unanswered(self) -> None:
        """For a request that settles with no answer (the client cancelled it)."""
        self.turnstile.release(self.ticket)
