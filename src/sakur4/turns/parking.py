"""The slot scheduler: which server slot a session's turn is sent to, and the states of
the sessions waiting for one (issue 37).

**Parking** is on where the kind can write a slot's state to a file (llama-server's
``--slot-save-path``) and the probe saw a restored state resume (``slot-restore``
among its sources: full attention, or a sliding-window model under ``--swa-full``; on
the checkpoint ring a restored state resumes nowhere, so parking would only cost).
Then a turn takes a slot as it is sent (:meth:`SlotScheduler.take`): the session's own
slot if it still holds it, else an empty one, else the one used longest ago, never one
another session's turn is using (it waits for one). The slot's previous session is
parked first (its state saved to its file, unless its last answer's state already is),
and the session's own state is restored from its file before its turn goes out. Every
answered turn's state is saved after the answer (:meth:`SlotScheduler.release`), so
a restarted server (same fingerprint: :func:`~sakur4.turns.slot_files.fingerprint`)
resumes each session from disk. A save or restore that fails never fails the turn:
it is re-processed, and its receipt says why.

**Without parking** a session keeps the slot it was given while the sessions active
in the last :data:`ACTIVE_SECONDS` do not outnumber the slots; when they do, turns go
unpinned and the server picks the slot whose prompt shares most with each (measured:
fixed pairs of 4 sessions on 2 slots processed 1.47x what the server's own choice did).

What happened goes in the turn's receipt under ``parking`` (the slot under ``slot``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import anyio

from sakur4 import engine
from sakur4.backends.kinds.base import SlotFiles
from sakur4.backends.ring import SlotPrediction
from sakur4.errors import BackendError
from sakur4.turns import voice
from sakur4.turns.context import TurnContext
from sakur4.turns.sessions import SessionState
from sakur4.turns.slot_files import SlotDirectory, file_name, fingerprint, session_key
from sakur4.turns.slots import SlotSent
from sakur4.turns.turn import Prepared
from sakur4.turns.watch import BackendWatch

log = logging.getLogger("sakur4.turns")

# A save that took less than this is made before the answer is released (a server
# stopped right after an answer keeps it; the benchmark's restart after call 19 lost
# that agent's last state, 316 tokens re-processed, while it was saved behind the
# answer); a slower one (a large state: ~57 kB a token for a 7B) is made behind it.
SAVE_INLINE_MS = 250.0

# A session counts as active (it may send again soon) this long after its last turn.
ACTIVE_SECONDS = 600.0

Key = tuple[int, str]


@dataclass(frozen=True)
class Parked:
    """A session's state in a file: what the slot held after one of its answers, as the
    gateway predicted it (None: not known, the file was found after a restart)."""

    name: str
    server: str
    tokens: int
    prediction: SlotPrediction | None = None
    layout: engine.Layout | None = None
    sent: SlotSent | None = None


class SlotScheduler:
    """Which slot each turn is sent to, and the parked sessions' files. One per
    pipeline; safe for concurrent sessions (one event loop)."""

    def __init__(self, ctx: TurnContext, watch: BackendWatch) -> None:
        self.settings, self.client, self.sessions = ctx.settings, ctx.client, ctx.sessions
        self.watch = watch
        self._occupant: dict[int, Key] = {}
        self._busy: set[int] = set()
        self._used: dict[int, float] = {}
        self._granted: dict[Key, int] = {}
        self._parked: dict[Key, Parked] = {}
        self._notes: dict[Key, dict[str, Any]] = {}
        self._active: dict[Key, float] = {}
        self._changed = asyncio.Condition()
        self._generation = watch.generation
        self._saves: set[asyncio.Task[None]] = set()
        # Sessions whose last save took under SAVE_INLINE_MS: saved before the answer goes.
        self._quick: set[Key] = set()
        self._directory: tuple[str, SlotDirectory] | None = None

    # What the server allows.

    def _files(self) -> SlotFiles | None:
        """The kind's slot files, where parking is on (see the module docstring)."""
        return None if self._off_because() else self.watch.probe.server.slot_files

    def _off_because(self) -> str | None:
        """Why sessions are not parked (None: they are)."""
        probe = self.watch.probe
        if self.settings.slot_parking == "off":
            return "SAKUR4_SLOT_PARKING=off"
        if probe.server.slot_files is None:
            return f"{probe.kind} writes no slot files"
        if probe.slot_actions != "supported":
            return "start the server with --slot-save-path DIR to park sessions"
        if "slot-restore" not in probe.sources:
            return "a restored slot state does not resume on this server and model"
        return None

    def parking(self) -> str:
        """Whether sessions are parked in slot files, and why not (one line to say)."""
        if (why := self._off_because()) is not None:
            return f"off ({why})"
        path = self.directory().path
        if path is None:
            return (
                "on (slot files on the server, not on this machine: neither capped nor owner-only)"
            )
        cap = self.settings.slot_files_cap_mb
        return f"on (slot files in {path}, owner-only, capped at {cap:,} MiB)"

    def directory(self) -> SlotDirectory:
        """The server's slot directory (its path None where it is not on this machine)."""
        url = self.client.url
        if self._directory is None or self._directory[0] != url:
            files = self.watch.probe.server.slot_files
            path = files.directory(url) if files is not None else None
            cap = self.settings.slot_files_cap_mb * 1024 * 1024
            self._directory = (url, SlotDirectory(path, cap))
        return self._directory[1]

    def _slots(self) -> int:
        return max(1, self.watch.probe.total_slots or 1)

    # A turn's slot.

    async def take(self, p: Prepared) -> dict[str, Any]:
        """The body to send ``p`` with, once its slot is its own (its state restored
        there when parked): held until :meth:`release`."""
        state = p.state
        key = (state.project_id, state.session)
        now = time.monotonic()
        self._active[key] = now
        files = self._files()
        if files is None:
            return self._unparked(p, now)
        # A restarted server shows it before the slots are trusted (a few ms: /props,
        # /slots); what was known of the slots is void after it.
        await self.watch.fresh_slots()
        if self.watch.generation != self._generation:
            self._generation = self.watch.generation
            self._occupant.clear()
            self._reinstate()
        slot = await self._claim(key)
        note: dict[str, Any] = {"slot": slot}
        try:
            occupant = self._occupant.get(slot)
            if occupant != key:
                if occupant is not None:
                    await self._park(files, occupant, slot, note)
                await self._unpark(files, state, slot, note)
                self._occupant[slot] = key
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._free(slot)
            raise
        self._used[slot] = time.monotonic()
        self._granted[key] = slot
        state.slot = slot
        self._notes[key] = {**self._notes.pop(key, {}), **note}
        return {**p.body, **self.watch.probe.server.request_fields(slot)}

    def _reinstate(self) -> None:
        """After a restart every session's prediction was forgotten; a parked one's state
        comes back from its file, so it plans as if held (planning as if nothing were
        cached tidies the prompt, which then misses its own file: 4 agents after a
        restart re-processed 1,002-1,369 tokens each where hearth did 172-508)."""
        server = fingerprint(self.watch.probe)
        for key, parked in self._parked.items():
            state = self.sessions.known(*key)
            if state is None or state.prediction is not None or parked.server != server:
                continue
            state.prediction, state.layout = parked.prediction, parked.layout

    def _unparked(self, p: Prepared, now: float) -> dict[str, Any]:
        """Without parking: the session's own slot, or none while sessions outnumber slots."""
        slots = self._slots()
        if slots <= 1 or p.state.slot is None:
            return p.body
        active = sum(1 for t in self._active.values() if now - t <= ACTIVE_SECONDS)
        if active <= slots:
            return p.body
        pinned = self.watch.probe.server.request_fields(p.state.slot)
        unpinned = self.watch.probe.server.request_fields(None)
        key = (p.state.project_id, p.state.session)
        self._notes[key] = {"unpinned": f"{active} sessions active on {slots} slots"}
        return {**{k: v for k, v in p.body.items() if k not in pinned}, **unpinned}

    async def _claim(self, key: Key) -> int:
        """A slot no other turn is using: the session's own, else an empty one, else the
        one used longest ago (waits while every slot is in use)."""
        async with self._changed:
            while True:
                idle = [s for s in range(self._slots()) if s not in self._busy]
                own = [s for s in idle if self._occupant.get(s) == key]
                empty = [s for s in idle if s not in self._occupant]
                chosen = (own or empty or sorted(idle, key=lambda s: self._used.get(s, 0.0)))[:1]
                if chosen:
                    self._busy.add(chosen[0])
                    return chosen[0]
                await self._changed.wait()

    async def _free(self, slot: int) -> None:
        async with self._changed:
            self._busy.discard(slot)
            self._changed.notify_all()

    # Parking and unparking.

    async def _park(self, files: SlotFiles, key: Key, slot: int, note: dict[str, Any]) -> None:
        """Save the slot's state for its session ``key``, unless its file already holds
        the session's last answer."""
        state = self.sessions.known(*key)
        if state is None or state.prediction is None:
            return  # the slot's content is not known: nothing worth a file
        held = self._held(key, state, slot)
        parked = self._parked.get(key)
        same = parked is not None and parked.server == held.server
        if same and parked is not None and parked.prediction is held.prediction:
            note["parked"] = {"session": key[1], "saved": "after its answer"}
            return
        try:
            parked = await self._save(files, key, slot, held)
        except BackendError as e:
            note["park_failed"] = f"{key[1]}: {e}"
            return
        note["parked"] = {"session": key[1], "tokens": parked.tokens}

    async def _save(self, files: SlotFiles, key: Key, slot: int, held: Parked) -> Parked:
        """Save ``slot`` to the session's file; ``held``: what it holds, as predicted."""
        moved = await files.save(self.client, slot, held.name, self._routed(key))
        self.directory().saved(held.name)
        parked = replace(held, tokens=moved.tokens)
        self._parked[key] = parked
        return parked

    def _routed(self, key: Key) -> dict[str, str]:
        """The session's routing headers: behind a router a slot file is written and read
        on the server that holds the session (without them a save could write another
        server's slot, another session's transcript, into this session's file)."""
        state = self.sessions.known(*key)
        return state.route.headers() if state is not None and state.route is not None else {}

    def _held(self, key: Key, state: SessionState, slot: int) -> Parked:
        """What ``slot`` holds for the session now, as a file would keep it."""
        server = fingerprint(self.watch.probe)
        name = file_name(server, session_key(*key))
        sent = self.sessions.slots.sent(slot)
        return Parked(name, server, 0, state.prediction, state.layout, sent)

    async def _unpark(
        self, files: SlotFiles, state: SessionState, slot: int, note: dict[str, Any]
    ) -> None:
        """Restore the session's state into ``slot`` from its file, where it has one made
        by this server; else it is re-processed (its prediction forgotten)."""
        key = (state.project_id, state.session)
        server = fingerprint(self.watch.probe)
        directory = self.directory()
        parked = self._parked.get(key)
        if parked is not None and parked.server != server:
            note["ignored"] = f"saved by another server ({parked.server}; now {server})"
            del self._parked[key]
            parked = None
        if parked is None:
            skey = session_key(*key)
            others = directory.made_by_others(server, skey)
            if others and "ignored" not in note:
                note["ignored"] = f"saved by another server ({', '.join(others)}; now {server})"
            name = file_name(server, skey)
            if directory.has(name):  # saved before the gateway started
                parked = Parked(name, server, 0)
        if parked is None:
            state.forget_server()
            return
        try:
            moved = await files.restore(self.client, slot, parked.name, self._routed(key))
        except BackendError as e:
            note["restore_failed"] = f"{e}; re-processed instead"
            self._parked.pop(key, None)
            directory.remove(parked.name)
            state.forget_server()
            voice.failure(f"session {state.session}: slot restore failed ({e}); re-processing")
            return
        directory.used(parked.name)
        note["restored_tokens"] = moved.tokens
        # The slot now holds exactly what the file does.
        state.prediction = parked.prediction
        state.layout = parked.layout if parked.prediction is not None else None
        if parked.sent is not None:
            self.sessions.slots.put(slot, parked.sent)

    # After the turn.

    async def release(self, state: SessionState, answered: bool) -> None:
        """The turn is over: an answered one's state is saved (before the answer is
        released where its last save was quick, else in the background, the slot held
        until it is written), and the slot is free for the next."""
        key = (state.project_id, state.session)
        slot = self._granted.pop(key, None)
        if slot is None:
            return
        files = self._files()
        if not answered or files is None or state.prediction is None:
            await self._free(slot)
            return
        held = self._held(key, state, slot)

        async def save() -> None:
            started = time.monotonic()
            try:
                await self._save(files, key, slot, held)
                if (time.monotonic() - started) * 1000 < SAVE_INLINE_MS:
                    self._quick.add(key)
                else:
                    self._quick.discard(key)
            except BackendError as e:
                self._notes[key] = {"save_failed": str(e)}
                log.warning("session %s: slot save failed (%s)", state.session, e)
            finally:
                await self._free(slot)

        if key in self._quick:
            await save()
            return
        task = asyncio.ensure_future(save())
        self._saves.add(task)
        task.add_done_callback(self._saves.discard)

    def note(self, state: SessionState) -> dict[str, Any]:
        """What the scheduler did for the session's turn, for its receipt (once)."""
        note = dict(self._notes.pop((state.project_id, state.session), {}))
        slot = note.pop("slot", None)
        return {
            **({"slot": slot} if slot is not None else {}),
            **({"parking": note} if note else {}),
        }

    async def settled(self) -> None:
        """Wait for every save in flight (tests, shutdown)."""
        while self._saves:
            await asyncio.gather(*list(self._saves), return_exceptions=True)
