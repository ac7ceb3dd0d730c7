"""The session page says how its last turn ended (issue 41): a session whose last turn
was refused cannot go on as it is, and the page said only "4 refused" while every turn
after the first refusal had been refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sakur4.gateway.dashboard import pages, view
from sakur4.receipts import Receipt, write_receipt
from sakur4.store import open_store
from sakur4.store.projects import add_project


def _receipt(project_id: int, turn: int, tokens: int, **kw: Any) -> Receipt:
    fields: dict[str, Any] = {
        "project_id": project_id,
        "session": "s",
        "turn": turn,
        "context_window": 8192,
        "prompt_tokens": tokens,
        "profile": "cache-first",
        "profile_reason": "probe: checkpoint source detected",
        "verdict": "fits",
        "cache_verdict": "reused",
        "server_cached": tokens - 100,
        "server_processed": 100,
    }
    return Receipt(**{**fields, **kw})


def test_the_last_turn_refused_is_said_first_with_what_to_do(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    write_receipt(store, _receipt(project.id, 1, 5000))
    for turn in (2, 3, 4, 5):
        refused = {"verdict": "refused", "cache_verdict": "unverifiable"}
        why = {"reason": "pressure 2.61 ≥ trigger 0.75 (cache-first): refused: the prompt needs"}
        write_receipt(store, _receipt(project.id, turn, 21_390, **refused, detail=why))
    data = view.session(store, project, "s")
    assert data["last_turn"]["state"] == "refused"
    assert data["last_turn"]["turn"] == 5
    html = pages.session_page(data, "/a")
    said = html[html.index('<p id="last-turn"') :]
    said = said[: said.index("</p>")]
    assert "last turn</a> (5) refused: its prompt needs 21,390 tokens" in said
    assert "the window holds 8,192" in said
    assert "/compact" in said  # what to do
    assert "4 refused, nothing sent" in html  # the count stays, in the totals


def test_a_session_that_goes_on_says_its_last_turn_was_answered(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    refused = {"verdict": "refused", "cache_verdict": "unverifiable"}
    write_receipt(store, _receipt(project.id, 1, 21_390, **refused))
    write_receipt(store, _receipt(project.id, 2, 5200, verdict="reclaimed"))
    data = view.session(store, project, "s")
    assert data["last_turn"]["state"] == "answered"
    html = pages.session_page(data, "/a")
    assert "last turn</a> (2) answered: 5,200 of 8,192 tokens, reclaimed" in html
    assert "1 refused, nothing sent" in html


def test_a_step_names_its_episodes_stored_size(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    folded = {
        "episode": 7,
        "from": "live",
        "to": "masked",
        "tokens": 2563,
        "tokens_before": 2563,
        "tokens_after": 12,
        "reclaimed": 2551,
    }
    write_receipt(store, _receipt(project.id, 1, 5000, verdict="reclaimed", steps=[folded]))
    html = pages.session_page(view.session(store, project, "s"), "/a")
    assert "episode 7 (2,563 tokens): live → masked, 2,563 → 12 tokens" in html
