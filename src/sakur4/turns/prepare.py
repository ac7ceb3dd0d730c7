"""A turn's first half: its request named, recorded, planned and rendered, ready to send.

0. The request's messages are checked whole; Claude Code's billing header is dropped
   (it changes per request); the session is named from what is left.
1. The harness resends the whole conversation; known cache churn is repaired against
   the session's last turn (:mod:`sakur4.turns.churn`), messages already seen map to
   their stored episodes, new ones are recorded under the project and session.
2. The context engine plans against the exact layout of the prompt this session
   last sent and the resume points predicted for the server.
3. The engine renders the messages to send; the prompt is measured as the server will
   see it, and planned again if the estimates fell short; tier changes are stored.

A turn refused (the window, a backend refusal) deletes the messages it recorded: a
refused request stores nothing but its refusal receipt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import anyio

from sakur4 import engine
from sakur4.anchors import list_anchors
from sakur4.backends.kinds import token_layouts
from sakur4.backends.layout import TokenLayout
from sakur4.backends.seam import Layouts
from sakur4.engine.folds import PREAMBLE_WITHOUT_TOOLS
from sakur4.episodes import forget_turn, last_turn, record_episodes, set_tiers
from sakur4.episodes.natures import detect
from sakur4.episodes.stream import refresh_episodes
from sakur4.errors import AnchorBudgetError, PromptTooLong
from sakur4.harnesses.compaction import as_served
from sakur4.receipts import list_receipts, write_receipt
from sakur4.store.projects import Project
from sakur4.turns.adapter import store_moves, to_engine, to_engine_anchors
from sakur4.turns.churn import repaired, without_billing_header
from sakur4.turns.context import TurnContext
from sakur4.turns.receipt import new_prompt, overflow_why, refusal
from sakur4.turns.sessions import SessionState, offers_open_fold
from sakur4.turns.turn import Named, Prepared
from sakur4.turns.validate import Checked, chat_messages
from sakur4.turns.watch import BackendWatch
from sakur4.vocabulary import natures_named

# Plans per turn when a rendered prompt measures larger than the window.
MAX_PLANS = 3

# The request as the server will see it, when the upstream converts it.
Shape = Callable[[dict[str, Any]], dict[str, Any]]


def _divergence(old: engine.Layout | None, new: TokenLayout, keys: Sequence[str]) -> int | None:
    """Where the new prompt first differs from the cached one, in tokens (None: extends it)."""
    if old is None:
        return None
    for span, key, mine in zip(old.spans, keys, new.spans, strict=False):
        if span.key != key or span.start != mine.start or span.end != mine.end:
            return min(span.start, mine.start)
    if len(keys) < len(old.spans):
        return old.spans[len(keys)].start
    return None


class Preparer:
    """Names, records, plans and renders turns (see the module docstring)."""

    def __init__(self, ctx: TurnContext, watch: BackendWatch) -> None:
        self.settings, self.store, self.calls = ctx.settings, ctx.store, ctx.calls
        self.sessions, self.shared = ctx.sessions, ctx.shared
        self.watch = watch
        # How the backend's prompts are measured (exact where it tokenizes for us).
        self.layouts: Layouts = token_layouts(ctx.client)
        # The natures whose text is kept whole (SAKUR4_KEEP_TEXT).
        self.keep = natures_named(ctx.settings.keep_text)
        # The last requests' messages that passed validation: a turn checks its new ones.
        self.checked = Checked()

    def name_turn(self, body: Any, project: Project, session_header: str | None) -> Named:
        """The request's messages, checked whole, and its session.

        The billing header goes before the session is derived: it changes per
        conversation, and a session is one conversation."""
        # A harness's own compaction request, served from the session's cached prompt
        # (OpenCode's rewritten onto it; Claude Code's already extends it).
        last = self.sessions.last_requests(project.id)
        compaction = as_served(body, last) if isinstance(body, Mapping) else None
        if compaction is not None:
            body = compaction.body
            session_header = compaction.session or session_header
        request = chat_messages(body, self.checked)
        messages, header = without_billing_header(request, self.settings.repair_churn)
        tools = body.get("tools") if isinstance(body, Mapping) else None
        session = self.sessions.session_of(project.id, messages, session_header, tools)
        receipt = compaction.receipt if compaction is not None else None
        return Named(body, request, messages, header, session, receipt)

    async def prepare(self, named: Named, project: Project, shape: Shape | None) -> Prepared:
        """Hold the session, number the turn, record its messages, plan and render it.

        The session's lock is held from here until the turn closes (the caller
        releases it)."""
        await self.watch.fresh()
        state = self.sessions.state(project.id, named.session, self.watch.probe.total_slots)
        await state.lock.acquire()
        turn = None
        try:
            if self.shared is not None:
                # Held across gateways too, its state rebuilt where another one moved it on.
                await self.shared.claim(state)
            if not state.resumed:
                # After a restart the turn numbers go on from what the store holds.
                stored = await self.calls.run(self._stored_turn, project, named.session)
                state.turn = max(state.turn, stored)
                state.resumed = True
            # The failed last turn's messages again: that turn retried, under its own
            # number, its messages already recorded (issue 31: retries counted as turns).
            failed = state.failed
            retry = (
                failed if failed is not None and list(failed.messages) == named.request else None
            )
            if retry is None:
                state.turn += 1
                turn = state.turn
            async with self.watch.watching():
                prepared = await self._record_and_plan(named, project, state, shape)
            return replace(prepared, request=tuple(named.request), retry=retry, served=named.served)
        except BaseException:
            if turn is not None:
                with anyio.CancelScope(shield=True):
                    await self.calls.run(forget_turn, self.store, project.id, named.session, turn)
                # The rows just deleted free their ids: SQLite gives the next row stored
                # the highest id plus one. Cached, a deleted episode would stand for
                # whatever takes its id next, and the next turn would send (and fold)
                # the refused turn's text in its place (issue 41: a compaction sent
                # the refused answer instead of its instruction; the session stayed
                # refused at the refused turn's size).
                state.episodes = {i: e for i, e in state.episodes.items() if e.turn != turn}
            if self.shared is not None:
                with anyio.CancelScope(shield=True):
                    await self.shared.release(state)
            state.lock.release()
            raise

    def _stored_turn(self, project: Project, session: str) -> int:
        latest = list_receipts(self.store, project.id, session=session, limit=1)
        return max([last_turn(self.store, project.id, session), *(r.turn for r in latest)])

    async def _record_and_plan(
        self, named: Named, project: Project, state: SessionState, shape: Shape | None
    ) -> Prepared:
        count = state.counter()
        fixed = repaired(named.messages, state.harness, self.settings.repair_churn)
        messages = fixed.messages
        # What each part is decides what may fold (issue 30): recorded one episode a part.
        chosen = self.settings.harness
        harness = detect(messages) if chosen == "auto" else chosen
        parts = state.classified.classify(messages, harness)
        recorded = [p.message for p in parts]
        ids = await self.calls.run(
            record_episodes,
            self.store,
            project.id,
            state.session,
            state.turn,
            recorded,
            count_tokens=count,
            known=state.known_ids(recorded),
            natures=[p.nature for p in parts],
            parts=[p.part for p in parts],
        )
        stored = await self.calls.run(refresh_episodes, self.store, project.id, ids, state.episodes)
        state.episodes = stored
        view = to_engine([stored[i] for i in ids], previous=state.view, keep=self.keep)
        state.view = view
        pinned = await self.calls.run(list_anchors, self.store, project.id, state.session)
        anchors = to_engine_anchors(pinned, count)
        checkpoints = state.checkpoints(self.watch.probe.resume_model)
        plan_settings = self.watch.plan_settings
        if not offers_open_fold(named.body.get("tools")):
            # The head names open_fold and recall only where the model can call them.
            plan_settings = replace(plan_settings, preamble=PREAMBLE_WITHOUT_TOOLS)
        window = plan_settings.window
        underestimate = 0
        for attempt in range(MAX_PLANS):
            plan = engine.plan_turn(
                view.episodes,
                plan_settings,
                anchors=anchors,
                layout=state.layout,
                checkpoints=checkpoints,
                count=count,
                underestimate=underestimate,
            )
            if plan.verdict == engine.Verdict.REFUSED:
                pins = sum(a.tokens for a in anchors)
                if pins > plan.anchor_budget:
                    await self._refused(project, state, plan, plan.prompt_tokens, messages)
                    raise AnchorBudgetError(pins, max(plan.anchor_budget, 0))
                # The receipt and the message give one figure (issue 41: they differed).
                needed = plan.new_tokens + underestimate
                await self._refused(project, state, plan, needed, messages)
                raise PromptTooLong(needed, window, overflow_why(view.episodes, anchors))
            rendered = engine.render_messages(view.episodes, anchors, plan, state.rendered)
            out = {k: v for k, v in named.body.items() if k != "messages"}
            out["messages"] = list(rendered.messages)
            # The kind's own fields (llama.cpp: cache_prompt, the pinned slot).
            out.update(self.watch.probe.server.request_fields(state.slot))
            if shape is not None:
                out = shape(out)
            layout = await self.layouts.layout(out)
            measured = len(layout.tokens)
            fits = measured <= window
            # Pressure counts everything the server will process: a plan that saw no
            # pressure where the measured prompt is at the trigger (tool definitions
            # and template tokens are no episode: ~1.1k tokens of OpenCode's tools gave
            # "6,569 of 8,192, pressure 0.74 < trigger 0.75", issue 31) plans again.
            missed = (
                plan.verdict is engine.Verdict.FITS and measured >= plan_settings.trigger_tokens
            )
            if fits and (not missed or attempt == MAX_PLANS - 1):
                break
            # Sizes are estimates where the server has not seen a message (code
            # tokenizes denser than characters/4): plan again knowing by how much,
            # rather than send a prompt the server refuses (issue 14: every turn
            # after the first overflow failed).
            underestimate = max(underestimate + 1, measured - plan.new_tokens)
        else:
            measured = len(layout.tokens)
            await self._refused(project, state, plan, measured, messages)
            raise PromptTooLong(measured, window, overflow_why(view.episodes, anchors))
        # Stored once the backend took the rendered prompt: a refused one changes nothing.
        moves = store_moves(view, plan.moves)
        if moves:
            await self.calls.run(set_tiers, self.store, project.id, moves)
        return Prepared(
            state,
            project,
            out,
            plan,
            view,
            rendered,
            layout,
            _divergence(state.layout, layout, rendered.keys),
            tuple(messages),
            fixed.changes,
            named.header,
            tuple(ids),
            tuple(recorded),
            harness,
        )

    async def _refused(
        self,
        project: Project,
        state: SessionState,
        plan: engine.Plan,
        needed: int,
        messages: Sequence[Mapping[str, Any]],
    ) -> None:
        window, url = self.watch.window, self.watch.client.url
        r = refusal(project, state, plan, window, url, needed, new_prompt(messages))
        await self.calls.run(write_receipt, self.store, r)
