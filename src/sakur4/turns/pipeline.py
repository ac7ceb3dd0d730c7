"""One turn through the pipeline: named, recorded, planned, rendered, sent, receipted.

:meth:`TurnPipeline.turn` is the one way a turn runs; the steps are each a module:
:mod:`.prepare` (name, repair, record, plan, render), :mod:`.receipt` (the receipt
opened, completed or failed), :mod:`.send` (the backend calls, through
:mod:`.watch`), :mod:`.sessions` and :mod:`.slots` (what each session and slot holds),
:mod:`.parking` (which slot a turn is sent to, and the parked sessions' slot files).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from sakur4 import engine
from sakur4.backends.http import HttpBackend
from sakur4.backends.report import PromptReport
from sakur4.backends.ring import SentPrompt
from sakur4.backends.seam import Backend
from sakur4.errors import Sakur4Error
from sakur4.probe import ProbeResult
from sakur4.receipts import Receipt, complete_receipt, record_harness, write_receipt
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns import receipt, voice
from sakur4.turns.context import TurnContext
from sakur4.turns.parking import SlotScheduler
from sakur4.turns.prepare import Preparer, Shape
from sakur4.turns.send import Sender
from sakur4.turns.sessions import FailedTurn
from sakur4.turns.turn import Outcome, Prepared, Turn
from sakur4.turns.watch import BackendWatch

log = logging.getLogger("sakur4.turns")


class TurnPipeline:
    """The turn pipeline for one backend. Safe for concurrent sessions."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: Backend,
        probe: ProbeResult,
        prober: HttpBackend | None = None,
    ) -> None:
        """``prober``: the client a changed server is probed again through (``client``
        itself when not given)."""
        # What every part shares, made once (issue 38: four constructors took it apart).
        ctx = TurnContext.open(settings, store, client)
        self.context = ctx
        self.settings, self.store, self.client = settings, store, client
        self.calls, self.sessions = ctx.calls, ctx.sessions
        self.watch = BackendWatch(ctx, probe, prober)
        self.preparer = Preparer(ctx, self.watch)
        self.layouts = self.preparer.layouts
        self.scheduler = SlotScheduler(ctx, self.watch)
        self.sender = Sender(ctx, self.watch, self.scheduler)

    @property
    def probe(self) -> ProbeResult:
        """What the backend was last found to be."""
        return self.watch.probe

    @property
    def window(self) -> int:
        """The backend's context window, in tokens."""
        return self.watch.window

    @property
    def profile(self) -> engine.Profile:
        """The eviction profile the probe chose (or the setting named)."""
        return self.watch.profile

    @contextlib.asynccontextmanager
    async def turn(
        self,
        body: Any,
        project: Project,
        session_header: str | None,
        shape: Shape | None = None,
        harness: str | None = None,
    ) -> AsyncIterator[Turn]:
        """The one way a turn runs: plan it and store its receipt, hold the session while
        the caller sends it (through :attr:`sender`), then complete the receipt (failed
        without an outcome).

        ``shape``: the request as the server will see it, when the upstream converts
        it (the layout is measured on that). ``harness``: who sent it, remembered for
        the session (the screens name it)."""
        started = time.monotonic()
        session = "?"  # a request too malformed to say whose it is
        try:
            named = self.preparer.name_turn(body, project, session_header)
            session = named.session
            prepared = await self.preparer.prepare(named, project, shape)
        except Sakur4Error as e:
            voice.not_sent(session, e)
            raise
        try:
            if harness is not None:
                await self.calls.run(record_harness, self.store, project.id, session, harness)
            r = receipt.opened(
                prepared,
                self.window,
                self.client.url,
                self.sessions.slots,
                self.probe.resume_model,
            )
            # Open until finish() completes it: the screens show it in flight meanwhile.
            opened = await self.calls.run(write_receipt, self.store, r, completed=False)
        except BaseException:
            if self.context.shared is not None:
                with anyio.CancelScope(shield=True):
                    await self.context.shared.release(prepared.state)
            prepared.state.lock.release()
            raise
        t = Turn(prepared, opened)
        error: BaseException | None = None
        try:
            yield t
        except BaseException as e:
            error = e
            raise
        finally:
            # A client that hangs up cancels the caller; the receipt and the session's
            # lock must still be settled.
            with anyio.CancelScope(shield=True):
                t.receipt = await self._finish(prepared, opened, t.outcome, started, error)

    async def _finish(
        self,
        p: Prepared,
        r: Receipt,
        outcome: Outcome | None,
        started: float,
        error: BaseException | None,
    ) -> Receipt:
        """Complete the turn's receipt, remember what the server now holds, release the
        session, and say on the terminal how the turn ended (``error``: why it got no
        answer)."""
        shared = self.context.shared
        saved = False
        try:
            noted = shared.note(p.state) if shared is not None else {}
            if outcome is not None:
                rep = outcome.report
                self._remember(p, rep, outcome.generated)
                await self.scheduler.release(p.state, answered=True)
                extra = {**self._check_layout(p, rep), **outcome.extra}
                note = {**extra, **self.scheduler.note(p.state), **noted}
                r = receipt.answered(r, rep, note)
                self.watch.answered(r.predicted_reuse, rep.reused)
            else:
                # The server's state after a failed request is unknown: forget it. The
                # messages were recorded: the next request's copies map to them.
                p.state.forget_server()
                await self.scheduler.release(p.state, answered=False)
                r = receipt.failed(r, {**self.scheduler.note(p.state), **noted})
                p.state.harness = list(p.harness)
                p.state.recorded = list(p.recorded)
                p.state.ids = list(p.ids)
                p.state.failed = FailedTurn(r.id, p.request)
            if shared is not None:
                # The receipt and the session's state in one transaction (issue 39 item 4).
                await shared.finish(r, p.state)
                saved = True
            else:
                await self.calls.run(complete_receipt, self.store, r)
            voice.turn(r, started, error)
            return r
        finally:
            if shared is not None and not saved:
                await shared.release(p.state)
            p.state.lock.release()

    def _check_layout(self, p: Prepared, rep: PromptReport) -> dict[str, Any]:
        """Hold the layout against the server's own count of the prompt it processed. A
        prompt built without a render that the server counted otherwise means the
        template renders this context in a way the learned pieces miss: from now on it
        is rendered again (and the receipt says so)."""
        if rep.processed is not None and rep.reused is not None:
            counted: int | None = rep.processed + rep.reused
        else:
            counted = rep.prompt_tokens
        if counted is None or counted == len(p.layout.tokens):
            return {}
        learned = p.layout.renders == 0 and p.layout.method != "estimated"
        if learned:
            self.layouts.distrust(p.layout)
            log.warning(
                "session %s turn %d: the server counted %d prompt tokens where the prompt "
                "built without a render has %d; rendering this template context again",
                p.state.session,
                p.state.turn,
                counted,
                len(p.layout.tokens),
            )
        return {"server_counted_prompt": counted, "layout_distrusted": learned}

    def _remember(self, p: Prepared, rep: PromptReport, generated: int) -> None:
        """What the server now holds for the session and its slot, after its answer."""
        state = p.state
        state.failed = None
        state.harness = list(p.harness)
        state.tools = p.body.get("tools")
        state.recorded = list(p.recorded)
        state.ids = list(p.ids)
        spans = tuple(
            engine.Span(key, s.start, s.end)
            for key, s in zip(p.rendered.keys, p.layout.spans, strict=True)
        )
        state.layout = engine.Layout(spans)
        sent = SentPrompt(
            tokens=p.layout.tokens,
            user_starts=p.layout.user_starts,
            generated=max(1, generated),
            reused=rep.reused,
        )
        rules = self.watch.rules
        before = state.prediction
        after = state.remember_sent(sent, rules)
        self.sessions.slots.record(state.slot, sent, p.header, rules, (before, after))
        count = state.counter()
        estimated = sum(count(str(m.get("content") or "")) for m in p.rendered.messages)
        if estimated > 0:
            state.ratio = max(0.25, min(4.0, len(p.layout.tokens) / (estimated / state.ratio)))
