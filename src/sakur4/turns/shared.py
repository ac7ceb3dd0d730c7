"""Sessions shared by gateway replicas (issue 39 item 4, ``SAKUR4_SHARED_SESSIONS``).

Several gateways in front of one server (or one router) and one store serve a
session turn by turn, any of them any turn, with the plan one gateway would make.
What a plan needs that cannot be read again from the store is the session's
:class:`~sakur4.turns.sessions.SessionState` past its caches: what the server holds
(the layout of the last prompt and the slot's prediction), the measured token ratio,
the last request and its tools, the recorded messages and their ids, a failed last
turn, the slot. Each turn's end writes them to the session's row
(:mod:`sakur4.store.session_states`) in the transaction that completes its receipt;
a turn that finds the row newer than what its gateway holds rebuilds the state from
it (the caches, episodes, the engine's view, the classified parts and the rendered
messages, start empty and fill again: they are read back from the store).

One turn of a session at a time across replicas: a turn claims the row's lease
before it plans and gives it up as its state is written; another gateway's turn of
the session waits for it (at most :data:`WAIT_SECONDS`, then a clear refusal). A
gateway killed mid-turn holds the session until its lease runs out (30 s).

The serialised form is exact: a prediction and a layout read back equal the ones
written (``tests/turns/test_shared_sessions.py`` holds that over generated ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sqlite3
import time
import uuid
from typing import Any

from sakur4 import engine
from sakur4.backends.ring import (
    Checkpoint,
    CheckpointRules,
    SentPrompt,
    SlotPrediction,
)
from sakur4.errors import SessionHeld
from sakur4.receipts import Receipt, complete_receipt_in
from sakur4.store import Store
from sakur4.store.session_states import (
    LEASE_SECONDS,
    HeldElsewhere,
    StoredSession,
    claim_session,
    release_session,
    renew_session,
    save_session_in,
)
from sakur4.turns.carried import Classified
from sakur4.turns.sessions import FailedTurn, SessionBook, SessionState
from sakur4.turns.slots import SlotSent
from sakur4.turns.storecalls import StoreCalls

log = logging.getLogger("sakur4.turns")

# How long a turn waits for another gateway's turn of its session: a lease, and a
# little more (a gateway killed mid-turn lets its session go when its lease runs out).
WAIT_SECONDS = LEASE_SECONDS + 5.0
# The form of the JSON written; a row of another form is not read (planned afresh).
FORM = 1

Key = tuple[int, str]


# The serialised form.


def prediction_json(p: SlotPrediction) -> dict[str, Any]:
    """A slot prediction as JSON, every field (its rules, checkpoints, the tokens held)."""
    r = p.rules
    return {
        "rules": [r.n_swa, r.n_ubatch, r.n_batch, r.min_step, r.max_checkpoints, r.recurrent],
        "cached_len": p.cached_len,
        "memory_from": p.memory_from,
        "checkpoints": [[c.n_tokens, c.pos_min, c.pos_max, c.request] for c in p.checkpoints],
        "reuse": list(p.reuse),
        "created": [list(c) for c in p.created],
        "cached": list(p.cached),
        # vLLM on a sliding-window model (block_cache.py): its block, the blocks a hit
        # needs kept, and the blocks kept along the cached tokens.
        "blocks": [r.block, r.window_blocks],
        "kept": sorted(p.kept),
    }


def prediction_from(d: dict[str, Any]) -> SlotPrediction:
    """What :func:`prediction_json` wrote, as it was."""
    n_swa, n_ubatch, n_batch, min_step, max_checkpoints, recurrent = d["rules"]
    block, window_blocks = d.get("blocks", (1, 0))
    rules = CheckpointRules(
        n_swa, n_ubatch, n_batch, min_step, max_checkpoints, bool(recurrent), block, window_blocks
    )
    return SlotPrediction(
        rules,
        d["cached_len"],
        d["memory_from"],
        tuple(Checkpoint(*c) for c in d["checkpoints"]),
        tuple(d["reuse"]),
        tuple(tuple(c) for c in d["created"]),
        tuple(d["cached"]),
        frozenset(d.get("kept", ())),
    )


def layout_json(layout: engine.Layout) -> list[list[Any]]:
    return [[s.key, s.start, s.end] for s in layout.spans]


def layout_from(spans: list[list[Any]]) -> engine.Layout:
    return engine.Layout(tuple(engine.Span(k, a, b) for k, a, b in spans))


def state_json(state: SessionState, sent: SlotSent | None) -> str:
    """What a replica needs to plan the session's next turn as this gateway would
    (``sent``: the session's slot's last prompt, as the slot book has it)."""
    slot_sent = None
    if sent is not None and sent.prediction is state.prediction:
        # The slot's last prompt is the session's (its prediction's tokens).
        slot_sent = {
            "user_starts": list(sent.last.user_starts),
            "generated": sent.last.generated,
            "reused": sent.last.reused,
            "header": sent.header,
        }
    failed = state.failed
    return json.dumps(
        {
            "form": FORM,
            "turn": state.turn,
            "slot": state.slot,
            "ratio": state.ratio,
            "layout": layout_json(state.layout) if state.layout is not None else None,
            "prediction": prediction_json(state.prediction) if state.prediction else None,
            "harness": state.harness,
            "tools": state.tools,
            "recorded": state.recorded,
            "ids": state.ids,
            "failed": (
                {"receipt": failed.receipt, "messages": list(failed.messages)} if failed else None
            ),
            "slot_sent": slot_sent,
        },
        separators=(",", ":"),
    )


def restore_state(state: SessionState, text: str, book: SessionBook) -> bool:
    """Make ``state`` what another gateway's turn left (``text``: :func:`state_json`),
    its caches emptied; False (``state`` left as it is) for a form this one does not read."""
    d = json.loads(text)
    if d.get("form") != FORM:
        return False
    state.turn = d["turn"]
    state.slot = d["slot"]
    state.ratio = d["ratio"]
    state.layout = layout_from(d["layout"]) if d["layout"] is not None else None
    state.prediction = prediction_from(d["prediction"]) if d["prediction"] else None
    state.harness = d["harness"]
    state.tools = d["tools"]
    state.recorded = d["recorded"]
    state.ids = d["ids"]
    failed = d["failed"]
    state.failed = FailedTurn(failed["receipt"], tuple(failed["messages"])) if failed else None
    # Caches: what this gateway holds of them may be turns old.
    state.episodes = {}
    state.view = None
    state.classified = Classified()
    state.rendered = engine.RenderMemo()
    held = d["slot_sent"]
    if held is not None and state.prediction is not None and state.slot is not None:
        tokens = tuple(t for t in state.prediction.cached if t is not None)
        last = SentPrompt(tokens, tuple(held["user_starts"]), held["generated"], held["reused"])
        book.slots.put(state.slot, SlotSent(last, state.prediction, held["header"]))
    return True


# The lease and the row.


class SharedSessions:
    """This gateway's side of the shared sessions: claims, renewals, writes."""

    def __init__(self, store: Store, calls: StoreCalls, sessions: SessionBook) -> None:
        self.store, self.calls, self.sessions = store, calls, sessions
        # Who holds a lease: this gateway (a process; two in one process are two).
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._renewing: dict[Key, asyncio.Task[None]] = {}
        # The version each session's state was rebuilt from this turn, for its receipt.
        self._rebuilt: dict[Key, int] = {}

    async def claim(self, state: SessionState) -> None:
        """Hold the session for this turn (waiting while another gateway serves it), and
        rebuild its state where the store's is newer than this gateway's."""
        key = (state.project_id, state.session)
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            got = await self.calls.run(
                claim_session, self.store, state.project_id, state.session, self.holder
            )
            if isinstance(got, StoredSession):
                break
            if time.monotonic() > deadline:
                raise SessionHeld(state.session, got.holder, got.seconds)
            await asyncio.sleep(_pause(got))
        if got.version != state.version:
            if got.state is not None and restore_state(state, got.state, self.sessions):
                self._rebuilt[key] = got.version
            state.version = got.version
        # The turn number goes on from the store's receipts (a refused turn writes one).
        state.resumed = False
        self._renewing[key] = asyncio.ensure_future(self._renew(state))

    async def _renew(self, state: SessionState) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            still = await self.calls.run(
                renew_session, self.store, state.project_id, state.session, self.holder
            )
            if not still:
                log.warning(
                    "session %s: its lease ran out mid-turn; another gateway may serve it",
                    state.session,
                )
                return

    def _stop_renewing(self, state: SessionState) -> None:
        task = self._renewing.pop((state.project_id, state.session), None)
        if task is not None:
            task.cancel()

    async def release(self, state: SessionState) -> None:
        """Give the session up without writing its state (a turn refused or broken
        before its receipt closed)."""
        self._stop_renewing(state)
        with contextlib.suppress(Exception):
            await self.calls.run(
                release_session, self.store, state.project_id, state.session, self.holder
            )

    def note(self, state: SessionState) -> dict[str, Any]:
        """For the turn's receipt: the stored version its state was rebuilt from, if it was."""
        version = self._rebuilt.pop((state.project_id, state.session), None)
        return {} if version is None else {"rebuilt_from_version": version}

    async def finish(self, r: Receipt, state: SessionState) -> None:
        """In one transaction: complete the turn's receipt, write the session's state,
        give the lease up. The state is stale here (rebuilt next turn) when the lease
        was lost meanwhile."""
        self._stop_renewing(state)
        sent = self.sessions.slots.sent(state.slot)
        saved = await self.calls.run(self._complete_and_save, r, state, sent)
        if saved:
            state.version = (state.version or 0) + 1
        else:
            state.version = None
            log.warning(
                "session %s: another gateway took it over mid-turn; its next turn reads "
                "the state that gateway wrote",
                state.session,
            )

    def _complete_and_save(self, r: Receipt, state: SessionState, sent: SlotSent | None) -> bool:
        text = state_json(state, sent)
        with self.store.tx() as c:
            complete_receipt_in(c, r)
            return self._save_in(c, state, text)

    def _save_in(self, c: sqlite3.Connection, state: SessionState, text: str) -> bool:
        version = state.version if state.version is not None else -1
        return save_session_in(c, state.project_id, state.session, self.holder, version, text)


def _pause(held: HeldElsewhere) -> float:
    """How long to wait before asking again: a short turn ends within a tenth of a second."""
    return max(0.02, min(0.2, held.seconds))
