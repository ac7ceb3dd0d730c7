"""The turn as a service: ``TurnPipeline.turn()`` without the gateway's HTTP surface or a real
server. A scripted stand-in answers the few calls a turn makes (template, tokens, a
chat answer whose reuse the test sets), so the lock, the receipt and the repairs can
be checked step by step. The real server runs these paths in tests/gateway."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sakur4.receipts import list_receipts, receipt_sessions
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.pipeline import TurnPipeline
from scripted_server import Scripted, scripted_pipeline

HEADER = "x-anthropic-billing-header: cc_version=2.1.332.{}; cc_entrypoint=sdk-cli;"


def _gateway(store: Store) -> tuple[TurnPipeline, Scripted]:
    return scripted_pipeline(store)


def _body(conversation: str, question: str) -> dict[str, Any]:
    system = HEADER.format(conversation) + "You are a careful coding agent. " * 20
    return {
        "model": "local",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
    }


async def _one_turn(
    gw: TurnPipeline,
    project: Project,
    body: dict[str, Any],
    session: str,
    harness: str | None = None,
) -> Any:
    async with gw.turn(body, project, session, harness=harness) as t:
        state = t.prepared.state
        assert state.lock.locked()  # held for as long as the turn is open
        stored = list_receipts(gw.store, project.id, session=session)
        assert [r.id for r in stored][-1:] == [t.receipt.id]  # written before sending
        assert stored[-1].cache_verdict == "unverifiable"
        assert stored[-1].outcome == "in flight"  # open: shown apart, in no total
        _, t.outcome = await gw.sender.chat(t.prepared)
    assert not state.lock.locked()
    assert list_receipts(gw.store, project.id, session=session)[-1].in_flight is False
    return t.receipt


def test_a_turn_writes_its_receipt_before_sending_and_completes_it_after(
    store: Store, project: Project
) -> None:
    gw, server = _gateway(store)
    receipt = asyncio.run(_one_turn(gw, project, _body("aaa", "Fix it."), "s1", "OpenCode 1.0"))
    assert server.chats == 1
    (summary,) = receipt_sessions(store, project.id)
    assert summary.harness == "OpenCode 1.0"  # the session is named by who sent it
    (stored,) = list_receipts(store, project.id, session="s1")
    assert stored.id == receipt.id
    assert stored.cache_verdict == "full-re-prefill"
    assert stored.server_processed == receipt.prompt_tokens


def test_a_turn_closed_without_an_answer_is_failed_and_frees_the_session(
    store: Store, project: Project
) -> None:
    gw, server = _gateway(store)

    async def cancelled() -> None:
        async with gw.turn(_body("aaa", "Fix it."), project, "s1"):
            raise asyncio.CancelledError  # the client hung up before the server answered

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled())
    (stored,) = list_receipts(store, project.id, session="s1")
    assert stored.detail["failed"] is True
    assert stored.outcome == "failed"  # closed, not in flight
    assert server.chats == 0
    # The session is not blocked by the turn that failed: the same request again is
    # answered, as that turn's retry (issue 31: a retry is the same turn, not a new one).
    receipt = asyncio.run(_one_turn(gw, project, _body("aaa", "Fix it."), "s1"))
    assert receipt.turn == 1
    assert receipt.detail["retry_of"] == 1
    assert server.chats == 1


def test_the_billing_header_repair_is_named_with_what_it_saved(
    store: Store, project: Project
) -> None:
    gw, server = _gateway(store)

    async def two_conversations() -> tuple[Any, Any]:
        first = await _one_turn(gw, project, _body("0b8", "Fix it."), "conv-1")
        second = await _one_turn(gw, project, _body("c5a", "Add a test."), "conv-2")
        return first, second

    first, second = asyncio.run(two_conversations())
    (on_first,) = first.detail["repairs"]
    assert on_first["kind"] == "billing-header"
    assert on_first["saved_predicted"] == 0  # nothing on the slot to reuse yet
    (repair,) = second.detail["repairs"]
    assert repair["kind"] == "billing-header"
    assert "cc_version=2.1.332.c5a" in repair["text"]
    # Without the repair the prompt would differ at the version suffix: a few tokens in.
    assert repair["reuse_without"] == repair["before"] < 60
    # With it, the second conversation reuses the system prompt the first one left;
    # the scripted server reports exactly that.
    assert repair["saved_predicted"] > 500
    assert second.server_cached == repair["reuse_without"] + repair["saved_predicted"]
    assert repair["saved_confirmed"] == repair["saved_predicted"]
    # The header never reached the server.
    assert "x-anthropic-billing-header" not in server.last


def test_with_repairs_off_the_header_goes_to_the_server(store: Store, project: Project) -> None:
    gw, server = scripted_pipeline(store, Settings.load(repair_churn=False))
    receipt = asyncio.run(_one_turn(gw, project, _body("0b8", "Fix it."), "s1"))
    assert receipt.detail["repairs"] == []
    assert "x-anthropic-billing-header" in server.last


@pytest.mark.parametrize("miscount", [0, 3])
def test_a_built_prompt_the_server_counted_otherwise_is_rendered_again(
    store: Store, project: Project, miscount: int
) -> None:
    # A conversation that only grows: after CONFIRMATIONS renders agreed with the
    # construction, its prompts are built without asking the server. If the server
    # then counts another prompt than the one built, the gateway distrusts the
    # construction for this template context and renders again from the next turn.
    gw, server = _gateway(store)
    body = _body("aaa", "Fix it.")

    async def grow(turns: int) -> list[Any]:
        receipts = []
        for k in range(turns):
            body["messages"] = [
                *body["messages"],
                {"role": "assistant", "content": f"Step {k} done."},
                {"role": "user", "content": f"Now step {k + 1}."},
            ]
            if k == 3:
                server.miscount = miscount
            receipts.append(await _one_turn(gw, project, body, "s1"))
            server.miscount = 0
        return receipts

    receipts = asyncio.run(grow(5))
    renders = [r.detail["layout_renders"] for r in receipts]
    assert renders[3] == 0  # built from proven pieces
    if miscount:
        assert receipts[3].detail["layout_distrusted"] is True
        assert receipts[3].detail["server_counted_prompt"] == receipts[3].prompt_tokens + miscount
        assert renders[4] > 0  # rendered again after the disagreement
    else:
        assert "layout_distrusted" not in receipts[3].detail
        assert renders[4] == 0
