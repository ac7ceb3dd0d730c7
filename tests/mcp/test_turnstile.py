"""The turnstile: on one stdio connection, requests take effect in arrival order."""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sakur4.mcp.turnstile import Turnstile

BURST = 360
WORD = "turnstileburst"


@pytest.mark.parametrize("era", ["2025-06-18", "2026-07-28"])
def test_each_recall_sees_exactly_the_notes_sent_before_it(
    raw_stdio: Any, modern_meta: dict[str, Any], era: str
) -> None:
    """One write of BURST interleaved remember/recall requests, none awaited in between,
    in both protocol eras (the SDK serves them by different loops).

    Its second request is one the SDK refuses before any middleware runs (in the
    handshake era a 2026 envelope, in the 2026 era an ``initialize``): its ticket must
    still be released, or every request after it would wait forever.
    """
    meta = None
    if era == "2025-06-18":
        raw_stdio.initialize()
        refused = raw_stdio.call(0, "remember", {"text": f"{WORD} refused"}, modern_meta)
    else:
        meta = modern_meta
        refused = raw_stdio.initialize_request(0)
    rng = random.Random(7)
    burst, expected, notes = b"", {}, 0
    for rid in range(1, BURST + 1):
        if rid == 2:  # the first request decides the era; the refused one comes next
            burst += refused
        if rng.random() < 0.5:
            burst += raw_stdio.call(rid, "remember", {"text": f"{WORD} note {rid}"}, meta)
            notes += 1
        else:
            args = {"query": WORD, "k": 200, "max_chars": 0}
            burst += raw_stdio.call(rid, "recall", args, meta)
            expected[rid] = notes
    raw_stdio.send(burst)
    answers = {}
    for _ in range(BURST + 1):
        answer = raw_stdio.receive(timeout=60)
        answers[answer["id"]] = answer
    assert len(answers) == BURST + 1
    assert "error" in answers[0]
    seen = {rid: len(answers[rid]["result"]["structuredContent"]["hits"]) for rid in expected}
    wrong = {rid: (seen[rid], want) for rid, want in expected.items() if seen[rid] != want}
    assert not wrong, f"{len(wrong)} of {len(expected)} recalls saw the wrong notes: {wrong}"
    assert 100 < notes < 200  # a real mix, and every note fits in one recall (k=200)
    code, _ = raw_stdio.close()
    assert code == 0


@pytest.mark.anyio
async def test_reads_overlap_but_never_pass_a_write() -> None:
    turnstile = Turnstile()
    w1 = turnstile.admit(1, writes=True)
    r2 = turnstile.admit(2, writes=False)
    r3 = turnstile.admit(3, writes=False)
    w4 = turnstile.admit(4, writes=True)
    r5 = turnstile.admit(5, writes=False)
    assert [turnstile.is_turn(t) for t in (w1, r2, r3, w4, r5)] == [
        True,
        False,
        False,
        False,
        False,
    ]
    turnstile.release(w1)
    assert [turnstile.is_turn(t) for t in (r2, r3, w4, r5)] == [True, True, False, False]
    turnstile.release(r3)  # reads may finish in any order
    assert not turnstile.is_turn(w4)
    turnstile.release(r2)
    assert turnstile.is_turn(w4)
    assert not turnstile.is_turn(r5)
    turnstile.release(w4)
    turnstile.release(w4)  # idempotent
    assert turnstile.is_turn(r5)


@pytest.mark.anyio
async def test_a_waiting_request_wakes_when_its_turn_comes() -> None:
    turnstile = Turnstile()
    first = turnstile.admit(1, writes=True)
    second = turnstile.admit(2, writes=False)
    order: list[str] = []

    async def later() -> None:
        await turnstile.wait_turn(second)
        order.append("second")

    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        await anyio.lowlevel.checkpoint()  # let `later` start waiting
        order.append("first")
        turnstile.release(first)
    assert order == ["first", "second"]


def test_a_ticket_the_gate_never_saw_is_released_by_its_answer() -> None:
    turnstile = Turnstile()
    refused = turnstile.admit("a", writes=True)  # answered by the SDK before any middleware
    waiting = turnstile.admit("b", writes=False)
    claimed = turnstile.admit("c", writes=False)
    claimed.claimed = True
    assert not turnstile.is_turn(waiting)
    turnstile.settle_answered("a")
    assert refused.released
    assert turnstile.is_turn(waiting)
    turnstile.settle_answered("c")  # the gate owns a claimed ticket: not released here
    assert not claimed.released
    assert not waiting.released
