"""The slot scheduler against a fake server's slots and files (faults a real server
cannot be made to show on demand, and thousands of orderings): no session's turn is
ever sent where the gateway believes its state is but another's is; restored files are
always the session's own; a slot serves one turn at a time; the directory is kept
under its cap. The real server: tests/gateway/test_parking.py."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probe_results import probe_result
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.routing import routing_key
from sakur4.settings import Settings
from sakur4.turns.context import TurnContext
from sakur4.turns.parking import SlotScheduler
from sakur4.turns.sessions import SessionBook
from sakur4.turns.slot_files import SlotDirectory, session_key
from sakur4.turns.storecalls import StoreCalls

PARKING = {"slot_actions": "supported", "sources": ("exact-prefix", "slot-restore")}


@dataclass
class FakeSlotServer:
    """What a llama-server's slots and its slot directory hold: each a session's name."""

    slots: dict[int, str | None] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    in_use: set[int] = field(default_factory=set)
    refuse_saves: bool = False  # a full disk
    saves: int = 0
    # The routing key each file was written and read with (a router's choice).
    routed: dict[str, set[str]] = field(default_factory=dict)

    def handle(self, request: httpx.Request) -> httpx.Response:
        slot = int(request.url.path.rsplit("/", 1)[1])
        action = request.url.params["action"]
        name = json.loads(request.content)["filename"]
        self.routed.setdefault(name, set()).add(request.headers.get("x-session-id", ""))
        if action == "save":
            if self.refuse_saves:
                return httpx.Response(500, json={"error": {"message": "failed to save"}})
            self.files[name] = self.slots.get(slot) or ""
            self.saves += 1
            return httpx.Response(200, json={"n_saved": 100, "n_written": 1000})
        held = self.files.get(name)
        if held is None or held == "corrupt":
            return httpx.Response(400, json={"error": {"message": "invalid slot save file"}})
        self.slots[slot] = held
        return httpx.Response(200, json={"n_restored": 100, "n_read": 1000})


def _scheduler(
    server: FakeSlotServer, slots: int = 1, **probe: Any
) -> tuple[SlotScheduler, SimpleNamespace, SessionBook]:
    client = LlamaCppClient(
        "http://127.0.0.1:9", timeout=5, transport=httpx.MockTransport(server.handle)
    )

    async def fresh_slots() -> None:
        return None

    watch = SimpleNamespace(
        probe=probe_result(total_slots=slots, **{**PARKING, **probe}),
        generation=0,
        fresh_slots=fresh_slots,
    )
    settings_ = Settings.load(slot_files_cap_mb=1)
    # The scheduler reads no store.
    ctx = TurnContext(settings_, None, client, StoreCalls(), SessionBook("x-session-id"))  # type: ignore[arg-type]
    return SlotScheduler(ctx, watch), watch, ctx.sessions  # type: ignore[arg-type]


async def _turn(
    scheduler: SlotScheduler,
    server: FakeSlotServer,
    sessions: SessionBook,
    name: str,
    *,
    answered: bool = True,
) -> dict[str, Any]:
    state = sessions.state(1, name, scheduler.watch.probe.total_slots)
    async with state.lock:
        body = await scheduler.take(SimpleNamespace(state=state, body={"messages": []}))  # type: ignore[arg-type]
        slot = body["id_slot"]
        # The property: where the gateway predicts the session's state, it is there.
        if state.prediction is not None:
            assert server.slots.get(slot) == name, (name, slot, server.slots)
        assert slot not in server.in_use, "two turns on one slot at once"
        server.in_use.add(slot)
        await asyncio.sleep(0)  # another session's turn may start meanwhile
        server.in_use.discard(slot)
        server.slots[slot] = name  # the server processed the session's prompt there
        if answered:
            state.prediction = object()  # type: ignore[assignment]  # what it now holds
        else:
            state.forget_server()
        await scheduler.release(state, answered=answered)
        return scheduler.note(state)


Op = tuple[str, int]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 3)),
        st.tuples(st.just("fail"), st.integers(0, 3)),
        st.tuples(st.just("corrupt"), st.integers(0, 3)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("disk"), st.integers(0, 1)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, slots=st.integers(1, 2))
def test_no_turn_is_predicted_on_another_sessions_state(ops: list[Op], slots: int) -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, watch, sessions = _scheduler(server, slots)
        names = [f"agent-{i}" for i in range(4)]
        for op, i in ops:
            if op in ("turn", "fail"):
                note = await _turn(scheduler, server, sessions, names[i], answered=op == "turn")
                await scheduler.settled()
                if "restored_tokens" in note.get("parking", {}):
                    # What was restored was this session's own file.
                    assert server.slots[note["slot"]] == names[i]
            elif op == "disk":  # full (saves refused), or space again
                server.refuse_saves = bool(i)
            elif op == "corrupt":
                for name in server.files:
                    server.files[name] = "corrupt" if i % 2 else server.files[name]
            else:  # the server restarted: its slots are empty, its files kept
                server.slots.clear()
                watch.generation += 1
                sessions.forget_server()
        # Every file holds the state of the session it is named for (never another's),
        # and was written and read with that session's routing key only.
        for name in names:
            key = session_key(1, name)
            own = {routing_key(1, name)}
            assert all(v == own for f, v in server.routed.items() if key in f), server.routed
            for file, held in server.files.items():
                if key in file:
                    assert held in (name, "corrupt"), (file, held, name)

    asyncio.run(run())


def test_concurrent_sessions_share_two_slots_one_turn_at_a_time() -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, _, sessions = _scheduler(server, 2)
        names = [f"agent-{i}" for i in range(5)]
        for _ in range(4):
            await asyncio.gather(*(_turn(scheduler, server, sessions, n) for n in names))
        await scheduler.settled()
        # Every session was parked and restored again, each from its own file.
        assert len(server.files) == len(names)

    asyncio.run(run())


def test_a_returning_session_is_restored_and_its_parked_neighbour_saved() -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, _, sessions = _scheduler(server, 1)
        await _turn(scheduler, server, sessions, "a")
        await scheduler.settled()
        note = await _turn(scheduler, server, sessions, "b")
        assert note["parking"]["parked"]["session"] == "a"
        await scheduler.settled()
        note = await _turn(scheduler, server, sessions, "a")
        assert note["parking"]["restored_tokens"] == 100
        assert server.slots[0] == "a"

    asyncio.run(run())


def test_a_failed_restore_is_said_and_the_turn_goes_on() -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, _, sessions = _scheduler(server, 1)
        await _turn(scheduler, server, sessions, "a")
        await _turn(scheduler, server, sessions, "b")
        await scheduler.settled()
        for name in server.files:
            server.files[name] = "corrupt"
        note = await _turn(scheduler, server, sessions, "a")
        assert "re-processed instead" in note["parking"]["restore_failed"]

    asyncio.run(run())


@pytest.mark.parametrize(
    ("probe", "parks"),
    [
        (PARKING, True),
        ({**PARKING, "slot_actions": "unsupported"}, False),  # no --slot-save-path
        ({**PARKING, "sources": ("checkpoint-ring",)}, False),  # a restore does not resume
    ],
)
def test_parking_only_where_slot_files_are_on_and_a_restore_resumes(
    probe: dict[str, Any], parks: bool
) -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, _, sessions = _scheduler(server, 1, **probe)
        for name in ("a", "b", "a"):
            state = sessions.state(1, name, 1)
            async with state.lock:
                await scheduler.take(SimpleNamespace(state=state, body={"id_slot": 0}))  # type: ignore[arg-type]
                state.prediction = object()  # type: ignore[assignment]
                await scheduler.release(state, answered=True)
        await scheduler.settled()
        assert bool(server.files) is parks

    asyncio.run(run())


def test_without_parking_sessions_outnumbering_slots_go_unpinned() -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, _, sessions = _scheduler(server, 2, slot_actions="unsupported")
        sent = []
        for name in ("a", "b", "c"):
            state = sessions.state(1, name, 2)
            body = {"id_slot": state.slot, "cache_prompt": True}
            sent.append(await scheduler.take(SimpleNamespace(state=state, body=body)))  # type: ignore[arg-type]
        assert "id_slot" in sent[0]
        assert "id_slot" in sent[1]  # two sessions, two slots: each keeps its own
        assert "id_slot" not in sent[2]  # three on two: the server picks

    asyncio.run(run())


def test_the_directory_is_kept_under_its_cap_least_recently_used_out(tmp_path: Path) -> None:
    directory = SlotDirectory(tmp_path, cap_bytes=2500)
    for i, name in enumerate(["sakur4-state-f-a.bin", "sakur4-state-f-b.bin"]):
        (tmp_path / name).write_bytes(b"x" * 1000)
        os.utime(tmp_path / name, (1000 + i, 1000 + i))
    (tmp_path / "sakur4-probe.bin").write_bytes(b"x" * 5000)  # the probe's: not ours
    directory.used("sakur4-state-f-a.bin")  # a restored: the most recently used
    (tmp_path / "sakur4-state-f-c.bin").write_bytes(b"x" * 1000)
    directory.saved("sakur4-state-f-c.bin")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["sakur4-probe.bin", "sakur4-state-f-a.bin", "sakur4-state-f-c.bin"]
    assert oct((tmp_path / "sakur4-state-f-c.bin").stat().st_mode & 0o777) == "0o600"


def test_a_session_whose_state_could_not_be_saved_is_predicted_empty() -> None:
    async def run() -> None:
        server = FakeSlotServer(refuse_saves=True)
        scheduler, _, sessions = _scheduler(server, 1)
        await _turn(scheduler, server, sessions, "a")
        await scheduler.settled()
        note = await _turn(scheduler, server, sessions, "b")
        assert "park_failed" in note["parking"]
        await scheduler.settled()
        await _turn(scheduler, server, sessions, "a")  # asserts a predicts nothing held

    asyncio.run(run())


def test_the_screens_say_what_the_scheduler_did() -> None:
    from sakur4.gateway.dashboard.view import events_of
    from sakur4.receipts import Receipt
    from sakur4.turns.voice import turn_line

    r = Receipt(
        project_id=1,
        session="coder",
        turn=3,
        context_window=4096,
        prompt_tokens=900,
        profile="cache-first",
        profile_reason="",
        verdict="fits",
        cache_verdict="resumed",
        backend="http://127.0.0.1:9",
        server_cached=880,
        server_processed=20,
        detail={
            "slot": 0,
            "parking": {"parked": {"session": "tester", "tokens": 812}, "restored_tokens": 870},
        },
    )
    events = events_of(r)
    assert "parked session tester (812 tokens) to free its slot" in events
    assert "restored from disk: 870 tokens" in events
    assert "(restored from disk: 870 tokens)" in turn_line(r, 1.0)
    failed = Receipt(**{**r.__dict__, "detail": {"parking": {"restore_failed": "400: bad"}}})
    assert "slot restore failed: 400: bad" in events_of(failed)


def test_after_a_restart_parked_sessions_plan_as_if_held() -> None:
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, watch, sessions = _scheduler(server, 1)
        await _turn(scheduler, server, sessions, "a")
        await _turn(scheduler, server, sessions, "b")
        await scheduler.settled()
        held = sessions.known(1, "a")
        assert held is not None
        before = held.prediction
        server.slots.clear()  # the server restarted
        watch.generation += 1
        sessions.forget_server()
        await _turn(scheduler, server, sessions, "b")  # the first turn after it
        # a's next turn is planned before its state is restored: as held, not as empty.
        assert held.prediction is before

    asyncio.run(run())


def test_a_quick_save_is_made_before_the_answer_is_released() -> None:
    # A server stopped right after an answer keeps that answer's state (the benchmark's
    # restart after call 19 lost it while it was saved behind the answer).
    async def run() -> None:
        server = FakeSlotServer()
        scheduler, _, sessions = _scheduler(server, 1)
        await _turn(scheduler, server, sessions, "a")  # the first save: behind the answer
        await scheduler.settled()
        assert server.saves == 1
        await _turn(scheduler, server, sessions, "a")  # quick before: made before release
        assert server.saves == 2

    asyncio.run(run())
