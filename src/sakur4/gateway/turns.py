"""One chat request through the gateway: repair, record, plan, render, send, receipt.

0. Known cache churn is repaired (:mod:`sakur4.gateway.churn`): Claude Code's
   billing header is dropped, a reminder re-written in the history moves to the
   tail; every repair and every other change is listed in the receipt.
1. The harness resends the whole conversation; messages already seen map to
   their stored episodes, new ones are recorded under the project and session.
2. The context engine plans against the exact layout of the prompt this session
   last sent and the resume points predicted for the server.
3. Tier changes are stored; the engine renders the messages to send.
4. The request goes to the session's slot with every other field unchanged.
5. A receipt records the plan and what the server reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from sakur4 import engine
from sakur4.anchors import list_anchors
from sakur4.backends.layout import TokenLayout
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.report import UNREPORTED, PromptReport
from sakur4.backends.ring import (
    CheckpointRules,
    SentPrompt,
    SlotPrediction,
    advance,
    common_prefix,
    empty_slot,
)
from sakur4.backends.routing import session_route
from sakur4.backends.seam import Backend, token_layouts
from sakur4.episodes import forget_turn, last_turn, record_episodes, set_tiers
from sakur4.episodes.natures import classify, detect
from sakur4.episodes.stream import refresh_episodes
from sakur4.errors import (
    AnchorBudgetError,
    BackendUnavailable,
    ContextOverflow,
    InputError,
    PromptTooLong,
    Sakur4Error,
)
from sakur4.gateway import voice
from sakur4.gateway.adapter import EngineView, store_moves, to_engine, to_engine_anchors
from sakur4.gateway.churn import Change, drop_billing_header, repair_messages
from sakur4.gateway.sessions import FailedTurn, SessionState, derive_session, summarises
from sakur4.gateway.validate import chat_messages
from sakur4.probe import (
    ProbeResult,
    recall_or_measure,
    save_probe,
    server_now,
    stored_probe,
)
from sakur4.receipts import (
    Receipt,
    cache_verdict,
    complete_receipt,
    list_receipts,
    record_harness,
    write_receipt,
)
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.vocabulary import estimate_tokens, natures_named

DONE = "data: [DONE]\n\n"
# Plans per turn when a rendered prompt measures larger than the window.
MAX_PLANS = 3

log = logging.getLogger("sakur4.gateway")


@dataclass(frozen=True)
class Prepared:
    """A planned turn, ready to send."""

    state: SessionState
    project: Project
    body: dict[str, Any]
    plan: engine.Plan
    view: EngineView
    rendered: engine.RenderedPrompt
    layout: TokenLayout
    divergence: int | None
    # The messages as recorded (after repairs): what the next turn is compared with.
    harness: tuple[dict[str, Any], ...] = ()
    changes: tuple[Change, ...] = ()
    # Claude Code's billing header, dropped from the system prompt (None: there was none).
    header: str | None = None
    # The episodes recorded (each message, or its parts when split by nature) and the
    # stored id of each.
    ids: tuple[int, ...] = ()
    recorded: tuple[dict[str, Any], ...] = ()
    # The harness shape the parts were classified by (sakur4.episodes.natures).
    shape: str = "generic"
    # The request's messages as they came, and the failed turn this one retries.
    request: tuple[dict[str, Any], ...] = ()
    retry: FailedTurn | None = None


@dataclass
class Outcome:
    """What a sent turn produced, for the receipt."""

    report: PromptReport = UNREPORTED
    generated: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """An open turn: planned, its receipt stored, the session held until the turn closes.

    The route sends it (:meth:`Gateway.send`, :meth:`Gateway.stream` or its own
    upstream call) and sets :attr:`outcome` once the server has answered in full; a
    turn that closes without one is recorded as failed.
    """

    prepared: Prepared
    receipt: Receipt
    outcome: Outcome | None = None


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


# A turn predicted to reuse at least this many tokens that reused none: the server's
# cache was emptied (a restart shows nothing else), so the next turn reads it again.
EMPTIED_BELOW = 256


def _emptied(predicted: int | None, reused: int | None) -> bool:
    return bool(predicted and predicted >= EMPTIED_BELOW and reused is not None and reused == 0)


class Gateway:
    """The gateway's request pipeline for one backend. Safe for concurrent sessions."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: Backend,
        probe: ProbeResult,
        prober: LlamaCppClient | None = None,
    ) -> None:
        """``prober``: a llama.cpp client to read the server's /props and /slots with,
        when it may have changed (``client`` itself when it is one)."""
        self.settings = settings
        self.store = store
        self.client = client
        self.probe = probe
        self._prober = prober or (client if isinstance(client, LlamaCppClient) else None)
        self.layouts = token_layouts(client)
        self.keep = natures_named(settings.keep_text)
        self.sessions: dict[tuple[int, str], SessionState] = {}
        # The server does not report -cms: the setting says it (a larger step than
        # the server's predicts fewer checkpoints, never more).
        rules = probe.checkpoint_rules() or CheckpointRules()
        self.rules = replace(rules, min_step=settings.checkpoint_min_step)
        self._store_lock = asyncio.Lock()
        self._slot_users: dict[int, int] = {}
        # Per slot: the last prompt it was sent (any session's), the prediction after
        # all of them, and the last one's billing header: what a new conversation on
        # the slot can reuse, and what a repair saves.
        self._slot_last: dict[int | None, SentPrompt] = {}
        self._slot_prediction: dict[int | None, SlotPrediction] = {}
        self._slot_header: dict[int | None, str | None] = {}
        if not probe.n_ctx:
            raise InputError(
                f"the backend {probe.url} ({probe.kind}) did not report its context window: "
                "set SAKUR4_BACKEND_WINDOW"
            )
        # Set when the backend was lost (a connection error): it may come back
        # restarted, with another window, so the next turn reads the window first.
        # Also set (without _lost) when a turn reused far less than predicted: a
        # server restarted between two turns shows nothing else.
        self._window_stale = False
        self._lost = False
        # Reading the backend again is done by one turn at a time (it may probe it).
        self._reread_lock = asyncio.Lock()
        # The newest task id the server showed at the last read (a smaller one: it
        # restarted), and whether this gateway has sent it a turn (a server whose slots
        # served nothing since it started, after that, restarted).
        self._last_task: int | None = None
        self._sent_any = False
        # Every session's plans share these; built once, again when the window changes.
        self.plan_settings = engine.PlanSettings(
            probe.n_ctx,
            engine.choose_profile(probe.source_class, settings.eviction_profile),
            engine.Policy(
                live_results=settings.live_results,
                tidy_budget=settings.tidy_budget,
                cut_tolerance=settings.cut_tolerance,
            ),
        )

    @property
    def window(self) -> int:
        """The backend's context window, in tokens."""
        return self.plan_settings.window

    @property
    def profile(self) -> engine.Profile:
        """The eviction profile the probe chose (or the setting named)."""
        return self.plan_settings.profile

    # -- the backend's window ----------------------------------------------------

    def backend_lost(self, error: BaseException | None = None) -> None:
        """The backend stopped answering: what it cached, and maybe its window, is gone."""
        if not self._lost:
            why = f" ({error})" if error is not None else f" ({self.client.url})"
            voice.failure(f"backend lost{why}; the next turn reads it again")
        self._window_stale = self._lost = True

    async def reread_window(self) -> int:
        """Read the backend again. A server that changed (another build, model, window,
        slot count or template; or restarted, as flags such as ``--swa-full`` are not
        shown) gets its probe taken again (:meth:`_reprobe`); a changed window alone (a
        restart with another ``-c``) also forgets what every session's slot was
        predicted to hold."""
        async with self._reread_lock:
            if self._prober is None or self.probe.kind != "llama.cpp":
                return await self._reread_window_only()
            now = await server_now(self._prober)
            restarted = (now.last_task is None and self._sent_any) or (
                self._last_task is not None and (now.last_task or -1) < self._last_task
            )
            self._last_task = now.last_task
            if now.fingerprint != self.probe.fingerprint or restarted:
                await self._reprobe(restarted)
            elif now.window is not None and now.window != self.window:
                voice.failure(
                    f"backend {self.client.url}: window {self.window:,} -> {now.window:,} tokens"
                )
                self.plan_settings = replace(self.plan_settings, window=now.window)
                for state in self.sessions.values():
                    state.forget_server()
            elif self._lost:
                for state in self.sessions.values():  # restarted: its cache is empty
                    state.forget_server()
            self._window_stale = self._lost = False
            return self.window

    async def _reread_window_only(self) -> int:
        """A server that shows no fingerprint (not llama.cpp): its window alone."""
        window = await self.client.context_window()
        changed = window is not None and window != self.window
        if changed and window is not None:
            voice.failure(f"backend {self.client.url}: window {self.window:,} -> {window:,} tokens")
            self.plan_settings = replace(self.plan_settings, window=window)
        if changed or self._lost:
            for state in self.sessions.values():
                state.forget_server()
        self._window_stale = self._lost = False
        return self.window

    async def _reprobe(self, restarted: bool) -> None:
        """Take the changed server's probe (stored for its fingerprint, or measured where
        nothing is at stake) and plan with it from now on."""
        assert self._prober is not None
        result, how = await recall_or_measure(
            self._prober, self.settings, self._recall, self._keep, changed=restarted
        )
        if not result.n_ctx:
            raise BackendUnavailable(self.client.url, "no longer reports its context window")
        old, self.probe = self.probe, result
        rules = result.checkpoint_rules() or CheckpointRules()
        self.rules = replace(rules, min_step=self.settings.checkpoint_min_step)
        self.plan_settings = replace(
            self.plan_settings,
            window=result.n_ctx,
            profile=engine.choose_profile(result.source_class, self.settings.eviction_profile),
        )
        # What every slot was predicted to hold belongs to the server that was.
        self._slot_last.clear()
        self._slot_prediction.clear()
        self._slot_header.clear()
        if result.total_slots != old.total_slots:
            self._slot_users.clear()
            for state in self.sessions.values():
                state.slot = self._assign_slot()
        for state in self.sessions.values():
            state.forget_server()
        voice.failure(
            f"backend {self.client.url} changed{' (restarted)' if restarted else ''}: window "
            f"{old.n_ctx:,} -> {result.n_ctx:,}, checkpoints {old.checkpoint_source} -> "
            f"{result.checkpoint_source} ({how}), profile {self.profile.name}"
        )

    async def _recall(self, url: str, fingerprint: str) -> ProbeResult | None:
        found: ProbeResult | None = await self._db(stored_probe, self.store, url, fingerprint)
        return found

    async def _keep(self, result: ProbeResult) -> None:
        await self._db(save_probe, self.store, result)

    def watched(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The watch every call to the backend goes through, a route's own upstream call
        included (the forwarded Anthropic path)."""
        return self._watching_backend()

    @contextlib.asynccontextmanager
    async def _watching_backend(self) -> AsyncIterator[None]:
        """Notice a backend that went away or now has a smaller window than planned for."""
        try:
            yield
        except ContextOverflow as e:
            voice.failure(f"backend refused a prompt over its window ({e}); reading it again")
            with contextlib.suppress(BackendUnavailable):
                await self.reread_window()
            raise
        except BackendUnavailable as e:
            self.backend_lost(e)
            raise

    # -- sessions --------------------------------------------------------------

    def _state(self, project: Project, session: str) -> SessionState:
        key = (project.id, session)
        state = self.sessions.get(key)
        if state is None:
            route = session_route(self.settings.routing_headers, project.id, session)
            state = SessionState(project.id, session, self._assign_slot(), route=route)
            self.sessions[key] = state
        return state

    def _assign_slot(self) -> int | None:
        """Pin each session to a slot: the least used, so sessions rarely share a cache."""
        slots = self.probe.total_slots or 1
        if slots <= 1:
            return 0
        counts = [self._slot_users.get(i, 0) for i in range(slots)]
        slot = counts.index(min(counts))
        self._slot_users[slot] = counts[slot] + 1
        return slot

    def session_of(
        self, project: Project, messages: Sequence[Mapping[str, Any]], header: str | None
    ) -> str:
        """The session a request names, else the one its opening derives, else (a
        summary of a conversation under its own system prompt, as aider's history
        summary) the conversation it quotes."""
        if header is not None:
            name = header.strip()
            if not name or len(name) > 200:
                raise InputError("X-Sakur4-Session must be 1 to 200 characters")
            return name
        derived = derive_session(messages)
        if (project.id, derived) not in self.sessions:
            for (pid, name), state in reversed(self.sessions.items()):  # the newest first
                if pid == project.id and summarises(messages, state.harness):
                    return name
        return derived

    # -- the turn ---------------------------------------------------------------

    def _count(self, state: SessionState) -> Any:
        ratio = state.ratio

        def count(text: str) -> int:
            return math.ceil(estimate_tokens(text) * ratio)

        return count

    async def _db(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run store work off the event loop, one writer at a time."""
        async with self._store_lock:
            return await asyncio.to_thread(fn, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def turn(
        self,
        body: Any,
        project: Project,
        session_header: str | None,
        shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        harness: str | None = None,
    ) -> AsyncIterator[Turn]:
        """The one way a turn runs: plan it and store its receipt, hold the session while
        the caller sends it, then complete the receipt (failed without an outcome).

        ``shape``: the request as the server will see it, when the upstream converts
        it (the layout is measured on that). ``harness``: who sent it, remembered for
        the session (the screens name it)."""
        started = time.monotonic()
        try:
            prepared = await self.prepare(body, project, session_header, shape)
        except Sakur4Error as e:
            voice.not_sent(self._named(body, project, session_header), e)
            raise
        try:
            if harness is not None:
                session = prepared.state.session
                await self._db(record_harness, self.store, project.id, session, harness)
            receipt = await self.open_receipt(prepared)
        except BaseException:
            self.release(prepared)
            raise
        t = Turn(prepared, receipt)
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
                t.receipt = await self.finish(
                    prepared, receipt, t.outcome, started=started, error=error
                )

    def _named(self, body: Any, project: Project, session_header: str | None) -> str:
        """The session a request belongs to, for a line on the terminal ("?" when the
        request is too malformed to say)."""
        try:
            messages = self._repair(chat_messages(body), None)[0]
            return self.session_of(project, messages, session_header)
        except Sakur4Error:
            return "?"

    def _repair(
        self, messages: list[dict[str, Any]], state: SessionState | None
    ) -> tuple[list[dict[str, Any]], tuple[Change, ...], str | None]:
        if not self.settings.repair_churn:
            previous = state.harness if state is not None else None
            return messages, repair_messages(messages, previous, repairs=()).changes, None
        header = None
        first = messages[0]
        if first.get("role") == "system" and isinstance(first.get("content"), str):
            kept, header = drop_billing_header(first["content"])
            if header is not None:
                messages = [{**first, "content": kept}, *messages[1:]]
        if state is None:
            return messages, (), header
        repaired = repair_messages(messages, state.harness)
        return repaired.messages, repaired.changes, header

    async def prepare(
        self,
        body: Any,
        project: Project,
        session_header: str | None,
        shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Prepared:
        """Record the request's messages, plan the turn and render what to send.

        The request is checked whole first; if the turn is refused after its new
        messages were recorded (the window, a backend refusal), they are deleted
        again: a refused request stores nothing but its refusal receipt.
        """
        messages = chat_messages(body)
        # The billing header goes before the session is derived: it changes per
        # conversation, and a session is one conversation.
        session = self.session_of(project, self._repair(messages, None)[0], session_header)
        if self._window_stale:
            async with self._watching_backend():
                await self.reread_window()
        state = self._state(project, session)
        await state.lock.acquire()
        turn = None
        try:
            if not state.resumed:
                # After a restart the turn numbers go on from what the store holds.
                state.turn = max(state.turn, await self._db(self._stored_turn, project, session))
                state.resumed = True
            # The failed last turn's messages again: that turn retried, under its own
            # number, its messages already recorded (issue 31: retries counted as turns).
            failed = state.failed
            retry = failed if failed is not None and list(failed.messages) == messages else None
            if retry is None:
                state.turn += 1
                turn = state.turn
            async with self._watching_backend():
                prepared = await self._prepare(body, messages, project, state, shape)
            return replace(prepared, request=tuple(messages), retry=retry)
        except BaseException:
            if turn is not None:
                with anyio.CancelScope(shield=True):
                    await self._db(forget_turn, self.store, project.id, session, turn)
            state.lock.release()
            raise

    def _stored_turn(self, project: Project, session: str) -> int:
        latest = list_receipts(self.store, project.id, session=session, limit=1)
        return max([last_turn(self.store, project.id, session), *(r.turn for r in latest)])

    async def _prepare(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        project: Project,
        state: SessionState,
        shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Prepared:
        count = self._count(state)
        messages, changes, header = self._repair(messages, state)
        # What each part is decides what may fold (issue 30): recorded one episode a part.
        chosen = self.settings.harness
        harness = detect(messages) if chosen == "auto" else chosen
        parts = classify(messages, harness)
        recorded = [p.message for p in parts]
        ids = await self._db(
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
        stored = await self._db(refresh_episodes, self.store, project.id, ids, state.episodes)
        state.episodes = stored
        view = to_engine([stored[i] for i in ids], previous=state.view, keep=self.keep)
        state.view = view
        pinned = await self._db(list_anchors, self.store, project.id, state.session)
        anchors = to_engine_anchors(pinned, count)
        checkpoints = state.checkpoints(self.probe.resume_model)
        underestimate = 0
        for attempt in range(MAX_PLANS):
            plan = engine.plan_turn(
                view.episodes,
                self.plan_settings,
                anchors=anchors,
                layout=state.layout,
                checkpoints=checkpoints,
                count=count,
                underestimate=underestimate,
            )
            if plan.verdict == engine.Verdict.REFUSED:
                await self._refusal_receipt(project, state, plan)
                needed = sum(a.tokens for a in anchors)
                if needed > plan.anchor_budget:
                    raise AnchorBudgetError(needed, max(plan.anchor_budget, 0))
                raise PromptTooLong(plan.new_tokens + underestimate, self.window, plan.reason)
            rendered = engine.render_messages(view.episodes, anchors, plan)
            out = {k: v for k, v in body.items() if k != "messages"}
            out["messages"] = list(rendered.messages)
            if self.probe.kind == "llama.cpp":
                # llama.cpp's own fields: another kind ignores them, warns or refuses.
                out["cache_prompt"] = True
                if state.slot is not None:
                    out["id_slot"] = state.slot
            if shape is not None:
                out = shape(out)
            layout = await self.layouts.layout(out)
            measured = len(layout.tokens)
            fits = measured <= self.window
            # Pressure counts everything the server will process: a plan that saw no
            # pressure where the measured prompt is at the trigger (tool definitions
            # and template tokens are no episode: ~1.1k tokens of OpenCode's tools gave
            # "6,569 of 8,192, pressure 0.74 < trigger 0.75", issue 31) plans again.
            missed = (
                plan.verdict is engine.Verdict.FITS
                and measured >= self.plan_settings.trigger_tokens
            )
            if fits and (not missed or attempt == MAX_PLANS - 1):
                break
            # Sizes are estimates where the server has not seen a message (code
            # tokenizes denser than characters/4): plan again knowing by how much,
            # rather than send a prompt the server refuses (issue 14: every turn
            # after the first overflow failed).
            underestimate = max(underestimate + 1, measured - plan.new_tokens)
        else:
            await self._refusal_receipt(project, state, plan)
            measured = len(layout.tokens)
            raise PromptTooLong(
                measured,
                self.window,
                f"the prompt measures {measured:,} tokens after every step this turn can "
                f"take; the window holds {self.window:,}",
            )
        # Stored once the backend took the rendered prompt: a refused one changes nothing.
        moves = store_moves(view, plan.moves)
        if moves:
            await self._db(set_tiers, self.store, project.id, moves)
        divergence = _divergence(state.layout, layout, rendered.keys)
        return Prepared(
            state,
            project,
            out,
            plan,
            view,
            rendered,
            layout,
            divergence,
            tuple(messages),
            changes,
            header,
            tuple(ids),
            tuple(recorded),
            harness,
        )

    def _before(self, p: Prepared, message: int, offset: int) -> int:
        """Tokens before a change at ``offset`` of harness ``message``, from the layout:
        the rendered message that holds it starts at an exact span; within it, the
        estimate."""
        count = self._count(p.state)
        text = str(p.harness[message].get("content") or "") if message < len(p.harness) else ""
        j = 0
        for i, m in enumerate(p.rendered.messages):
            if text and isinstance(m.get("content"), str) and text[:offset] in m["content"]:
                j = i
                if i > 0:
                    break
        start = p.layout.spans[j].start if j < len(p.layout.spans) else 0
        return start + (count(text[:offset]) if offset else 0)

    def _reuse_at(self, slot: int | None, divergence: int) -> int:
        """Tokens the server would reuse on ``slot`` for a prompt that first differs from
        the slot's last one at ``divergence``, by the server's resume model."""
        last = self._slot_last.get(slot)
        prediction = self._slot_prediction.get(slot)
        if last is None or prediction is None:
            return 0
        return self.probe.resume_model.resume_at(divergence, len(last.tokens), prediction)

    def _repairs(self, p: Prepared) -> list[dict[str, Any]]:
        """Each repair with the re-processing it spares, predicted from the layout.

        ``before``: the token where the prompt would first differ without the repair;
        ``reuse_without``/``saved_predicted``: what the server would reuse without it,
        and how much more it reuses with it, by the same model the plan uses."""
        out: list[dict[str, Any]] = []
        slot = p.state.slot
        sent = self._slot_last.get(slot)
        last = sent.tokens if sent is not None else ()
        with_repair = self._reuse_at(slot, common_prefix(last, p.layout.tokens))
        if p.header is not None:
            previous = self._slot_header.get(slot)
            if previous is not None and previous != p.header:
                offset = common_prefix(previous, p.header)
                start = p.layout.spans[0].start if p.layout.spans else 0
                before = start + self._count(p.state)(p.header[:offset])
            else:
                # The same header as the slot's last prompt: it changed nothing this turn.
                before = len(last)
            without = self._reuse_at(slot, before)
            out.append(
                {
                    "kind": "billing-header",
                    "message": 0,
                    "text": p.header[:120],
                    "before": before,
                    "reuse_without": without,
                    "saved_predicted": max(0, with_repair - without),
                }
            )
        for c in p.changes:
            if not c.repaired:
                continue
            before = self._before(p, c.message, c.offset)
            without = self._reuse_at(slot, before)
            out.append(
                {
                    **c.as_dict(),
                    "before": before,
                    "reuse_without": without,
                    "saved_predicted": max(0, with_repair - without),
                }
            )
        return out

    async def _refusal_receipt(
        self, project: Project, state: SessionState, plan: engine.Plan
    ) -> None:
        r = Receipt(
            project_id=project.id,
            session=state.session,
            turn=state.turn,
            context_window=self.window,
            prompt_tokens=plan.prompt_tokens,
            profile=plan.profile.name,
            profile_reason=plan.profile.reason,
            verdict=plan.verdict.value,
            cache_verdict="unverifiable",
            backend=self.client.url,
            detail={"reason": plan.reason},
        )
        await self._db(write_receipt, self.store, r)

    async def open_receipt(self, p: Prepared) -> Receipt:
        """Store the receipt of a prepared turn before sending: its id goes in the headers."""
        plan = p.plan
        steps = [
            {
                "episode": p.view.store_id.get(s.episode_id, s.episode_id),
                "from": s.from_tier.label,
                "to": s.to_tier.label,
                "tokens_before": s.tokens_before,
                "tokens_after": s.tokens_after,
                "reclaimed": s.reclaimed,
            }
            for s in plan.steps
        ]
        r = Receipt(
            project_id=p.project.id,
            session=p.state.session,
            turn=p.state.turn,
            context_window=self.window,
            prompt_tokens=len(p.layout.tokens),
            profile=plan.profile.name,
            profile_reason=plan.profile.reason,
            verdict=plan.verdict.value,
            cache_verdict="unverifiable",
            steps=steps,
            backend=self.client.url,
            requested_cut=plan.requested_cut,
            chosen_cut=plan.chosen_cut,
            predicted_reuse=plan.reused,
            divergence=p.divergence,
            detail={
                "reason": plan.reason,
                "planned_prompt_tokens": plan.prompt_tokens,
                "held": [h.episode_id for h in plan.held],
                "slot": p.state.slot,
                "repairs": self._repairs(p),
                "churn": [c.as_dict() for c in p.changes if not c.repaired],
                # 0: the prompt was built from pieces earlier renders proved (issue 17).
                "layout_renders": p.layout.renders,
                # "estimated": the server could not lay the prompt out (issue 29).
                "layout": p.layout.method,
                "harness_shape": p.shape,
                **({"retry_of": p.retry.receipt} if p.retry is not None else {}),
            },
        )
        # Open until finish() completes it: the screens show it in flight meanwhile.
        stored: Receipt = await self._db(write_receipt, self.store, r, completed=False)
        return stored

    async def finish(
        self,
        p: Prepared,
        r: Receipt,
        outcome: Outcome | None,
        *,
        started: float | None = None,
        error: BaseException | None = None,
    ) -> Receipt:
        """Complete the turn's receipt, remember what the server now holds, release the
        session, and say on the terminal how the turn ended (``started``: when it arrived;
        ``error``: why it got no answer)."""
        try:
            if outcome is not None:
                rep = outcome.report
                # Confirmed: the part of the predicted saving the server's reuse bears
                # out (what it reused beyond what it would have without the repair);
                # unknown when it did not say.
                repairs = [
                    {
                        **x,
                        "saved_confirmed": None
                        if rep.reused is None
                        else min(x["saved_predicted"], max(0, rep.reused - x["reuse_without"])),
                    }
                    for x in r.detail.get("repairs", [])
                ]
                r = replace(
                    r,
                    server_cached=rep.reused,
                    server_processed=rep.processed,
                    prefill_ms=rep.prompt_ms,
                    cache_verdict=cache_verdict(rep.reused, rep.processed),
                    detail={
                        **r.detail,
                        "repairs": repairs,
                        **self._check_layout(p, rep),
                        **outcome.extra,
                    },
                )
                self._remember(p, rep, outcome.generated)
                if _emptied(r.predicted_reuse, rep.reused):
                    self._window_stale = True
            else:
                r = replace(r, detail={**r.detail, "failed": True})
                # The server's state after a failed request is unknown: forget it. The
                # messages were recorded: the next request's copies map to them.
                p.state.forget_server()
                p.state.harness = list(p.harness)
                p.state.recorded = list(p.recorded)
                p.state.ids = list(p.ids)
                p.state.failed = FailedTurn(r.id, p.request)
            await self._db(complete_receipt, self.store, r)
            voice.turn(r, time.monotonic() if started is None else started, error)
            return r
        finally:
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

    def release(self, p: Prepared) -> None:
        """Give the session back without a receipt (the request never left)."""
        p.state.lock.release()

    def _remember(self, p: Prepared, rep: PromptReport, generated: int) -> None:
        p.state.failed = None
        self._sent_any = True
        p.state.harness = list(p.harness)
        p.state.recorded = list(p.recorded)
        p.state.ids = list(p.ids)
        self._slot_header[p.state.slot] = p.header
        spans = tuple(
            engine.Span(key, s.start, s.end)
            for key, s in zip(p.rendered.keys, p.layout.spans, strict=True)
        )
        p.state.layout = engine.Layout(spans)
        sent = SentPrompt(
            tokens=p.layout.tokens,
            user_starts=p.layout.user_starts,
            generated=max(1, generated),
            reused=rep.reused,
        )
        p.state.remember_sent(sent, self.rules)
        slot = p.state.slot
        self._slot_last[slot] = sent
        self._slot_prediction[slot] = advance(
            self._slot_prediction.get(slot) or empty_slot(self.rules), sent
        )
        estimated = sum(
            self._count(p.state)(str(m.get("content") or "")) for m in p.rendered.messages
        )
        if estimated > 0:
            p.state.ratio = max(0.25, min(4.0, len(p.layout.tokens) / (estimated / p.state.ratio)))

    # -- sending ------------------------------------------------------------------

    async def send(self, p: Prepared) -> tuple[Mapping[str, Any], Outcome]:
        async with self._watching_backend():
            answer = await self.client.chat(p.body, p.state.route)
        usage = answer.json.get("usage")
        generated = usage.get("completion_tokens", 1) if isinstance(usage, Mapping) else 1
        return answer.json, Outcome(answer.report, int(generated or 1))

    @contextlib.asynccontextmanager
    async def stream(self, p: Prepared) -> AsyncIterator[tuple[AsyncIterator[str], Outcome]]:
        """The SSE lines to pass on, and the outcome filled in as the stream ends."""
        outcome = Outcome()
        wants_usage = bool((p.body.get("stream_options") or {}).get("include_usage"))
        async with (
            self._watching_backend(),
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
                    self.backend_lost(e)  # cut off mid-answer
                    raise
                outcome.report = events.report
                yield DONE

            yield lines(), outcome
