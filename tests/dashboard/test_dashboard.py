"""The dashboard over a hand-built store (no server): what the pages and the JSON say,
the drop-oldest estimate, and that the routes sit behind the exposure policy.

The real session, in a real browser, is tests/gateway/test_dashboard_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from sakur4.anchors import pin_anchor
from sakur4.episodes import record_episodes, set_tiers
from sakur4.gateway.app import create_dashboard_app
from sakur4.gateway.dashboard import pages, view
from sakur4.gateway.dashboard.estimate import Message, estimate
from sakur4.gateway.dashboard.view import events_of
from sakur4.receipts import Receipt, list_receipts, receipt_row, record_harness, write_receipt
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import add_project
from sakur4.vocabulary import Tier

WINDOW = 4096
BASE = "http://127.0.0.1:8741"


def receipt(turn: int, tokens: int, **kw: Any) -> Receipt:
    fields: dict[str, Any] = {
        "project_id": 1,
        "session": "s",
        "turn": turn,
        "context_window": WINDOW,
        "prompt_tokens": tokens,
        "profile": "cache-first",
        "profile_reason": "probe: checkpoint source detected",
        "verdict": "fits",
        "cache_verdict": "reused",
        "server_cached": max(0, tokens - 100),
        "server_processed": min(tokens, 100),
        "prefill_ms": 10.0 * turn,
    }
    return Receipt(**{**fields, **kw})


def step(reclaimed: int) -> dict[str, Any]:
    return {
        "episode": 1,
        "from": "live",
        "to": "masked",
        "tokens_before": reclaimed + 10,
        "tokens_after": 10,
        "reclaimed": reclaimed,
    }


def messages(*turns: list[tuple[str, int]]) -> list[Message]:
    """The session's stored messages: per turn, (role, tokens) in order."""
    return [Message(n, role, size) for n, ms in enumerate(turns, 1) for role, size in ms]


def test_drop_oldest_appends_then_truncates_to_the_target_keeping_the_head() -> None:
    # trigger 0.75 * 4096 = 3072, target 0.55 * 4096 = 2252.8
    turns = [
        receipt(1, 1000),
        receipt(2, 2000),
        receipt(3, 3000),
        # Sakur4 folded 1,000 tokens: the client's own prompt was 3,500, past the trigger.
        receipt(4, 2500, verdict="reclaimed", steps=[step(1000)]),
        receipt(5, 2700),  # the client's 3,700
    ]
    stored = messages(
        [("system", 300), ("user", 700)],  # the head: 1,000 - 700
        [("assistant", 400), ("user", 600)],
        [("assistant", 500), ("tool", 500)],
        [("user", 500)],
        [("user", 200)],
    )
    est = estimate(turns, 0.75, 0.55, stored)
    # 1,000 + 1,000 + 1,000 appended; at turn 4 (3,500 >= 3,072) the 700, 400 and 600
    # go (1,700 >= the 1,247.2 needed), leaving 300 + 1,500: all after the 300-token
    # head re-processed (1,500); then the 200 appended.
    assert est.reprefilled == 1000 + 1000 + 1000 + 1500 + 200
    assert est.truncations == 1


def test_a_first_prompt_over_the_target_does_not_make_truncation_free() -> None:
    # Issue 31: OpenCode's first prompt (4,865) is over the target (4,505.6 of 8,192):
    # taken whole as the head, every truncation re-processed nothing ("drop-oldest
    # 5,347 against Sakur4's 15,323"). The head is its system prompt and tools only.
    window = {"context_window": 8192}
    turns = [receipt(n, 4865 + 1000 * (n - 1), **window) for n in range(1, 6)]
    stored = messages(
        [("system", 800), ("user", 1000)],
        *[[("assistant", 500), ("user", 500)] for _ in range(4)],
    )
    est = estimate(turns, 0.75, 0.55, stored)
    # Turn 3's 6,865 >= 6,144: 2,000 of the 2,359.6 needed is not enough, so a fourth
    # message goes: 3,865 + 500 kept, the 500 after the head re-processed. Turn 4
    # appends 1,000 (5,365); turn 5's 6,365 drops four again: 500 re-processed.
    assert est.reprefilled == 4865 + 1000 + 500 + 1000 + 500
    assert est.truncations == 2


@pytest.mark.parametrize(
    ("turns", "why"),
    [
        ([], "no turn"),
        ([receipt(1, 100, verdict="refused")], "no turn"),
        ([receipt(1, 100), receipt(2, 200, context_window=8192)], "window changed"),
        ([receipt(1, 300), receipt(2, 200)], "prompt shrank at turn 2"),
        ([receipt(1, 100), receipt(2, 200, detail={"failed": True})], "messages are not"),
        (
            [receipt(1, 100), receipt(2, 200, detail={"churn": [{"kind": "date"}]})],
            "rewrote earlier messages (turn 2)",
        ),
    ],
)
def test_no_estimate_where_the_receipts_cannot_carry_one(turns: list[Receipt], why: str) -> None:
    stored = [] if why == "messages are not" else messages([("user", 50)], [("user", 50)])
    est = estimate(turns, 0.75, 0.55, stored)
    assert est.reprefilled is None
    assert why in est.why


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Any]]:
    """A store with one session: three receipts (one unverifiable), episodes (one
    folded), two anchors; the dashboard app alone in front of it."""
    root = tmp_path / "project"
    root.mkdir()
    store = open_store(tmp_path / "store.db")
    project = add_project(store, root)
    name = "demo <b>&"
    ids = record_episodes(
        store,
        project.id,
        name,
        1,
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Read the file."},
            {"role": "assistant", "content": "The file says hello."},
        ],
    )
    set_tiers(store, project.id, {ids[1]: Tier.MASKED})
    pin_anchor(store, project.id, "never touch prod", priority=10)
    pin_anchor(store, project.id, "tabs, not spaces", priority=1, session=name)
    for turn, tokens, kw in [
        (1, 900, {}),
        (2, 1800, {"cache_verdict": "unverifiable", "server_cached": None}),
        (3, 1500, {"verdict": "reclaimed", "steps": [step(700)], "chosen_cut": 640}),
    ]:
        fields = {"project_id": project.id, "session": name, **kw}
        if fields.get("cache_verdict") == "unverifiable":
            fields["server_processed"] = None
            fields["prefill_ms"] = None
        write_receipt(store, receipt(turn, tokens, **fields))
    settings = Settings.load(store=tmp_path / "store.db", project=root, backend=None)
    with TestClient(create_dashboard_app(settings), base_url=BASE) as client:
        yield client, (store, project, name, ids)
    store.close()


def test_the_session_page_shows_the_receipts_of_the_store(served: Any) -> None:
    client, (store, project, name, ids) = served
    index = client.get("/sakur4/")
    assert index.status_code == 200
    link = re.search(r'href="(/sakur4/projects/\d+/sessions/[^"]+)"', index.text)
    assert link is not None
    assert "demo &lt;b&gt;&amp;" in index.text  # escaped, never markup
    page = client.get(link.group(1).replace("&amp;", "&"))
    assert page.status_code == 200, page.text
    html = page.text
    receipts = list_receipts(store, project.id, session=name)
    assert html.count('class="point"') == len(receipts) == 3
    for r in receipts:
        for cell in receipt_row(r).values():
            assert f">{escape(cell, quote=False)}<" in html
    assert 'class="bar unverifiable"' in html
    assert "unverifiable" in html
    assert f'href="/sakur4/folds/{ids[1]}?project={project.id}"' in html
    # Each episode's kind and what it is (issue 30): a generic client's user message
    # cannot be classified, the system prompt is an instruction.
    assert "<td>message</td><td>unclassified</td>" in html
    assert "<td>message</td><td>instruction</td>" in html
    assert html.index("never touch prod") < html.index("tabs, not spaces")
    assert "<b>" not in html.replace("<b>&", "")  # the session's name never as markup

    api = client.get(link.group(1).replace("&amp;", "&").replace("/sakur4/", "/sakur4/api/", 1))
    data = api.json()
    assert [t["prompt_tokens"] for t in data["turns"]] == [r.prompt_tokens for r in receipts]
    assert data["totals"]["reprefilled"] == 100 + 1800 + 100  # unverifiable: all of it
    assert data["drop_oldest_estimate"]["reprefilled"] is not None
    assert data["drop_oldest_estimate"]["sakur4_reprefilled"] == 2000
    # The version moves when the session does: a new turn.
    write_receipt(store, receipt(4, 1600, project_id=project.id, session=name))
    again = client.get(api.url).json()
    assert again["version"] != data["version"]
    assert len(again["turns"]) == 4


def test_a_fold_opens_from_its_link(served: Any) -> None:
    client, (_, project, _, ids) = served
    fold = client.get(f"/sakur4/folds/{ids[1]}?project={project.id}")
    assert fold.status_code == 200
    assert fold.json()["content"] == "Read the file."
    assert client.get(f"/sakur4/folds/{ids[1]}?project=999").status_code == 404
    assert client.get(f"/sakur4/folds/{ids[1]}?project=x").status_code == 400


def test_the_dashboard_is_behind_the_exposure_policy(served: Any) -> None:
    client, _ = served
    for path in ("/sakur4/", "/sakur4/api/projects", "/sakur4/static/dashboard.js"):
        assert client.get(path).status_code == 200
        assert client.get(path, headers={"host": "evil.example"}).status_code == 421
        assert client.get(path, headers={"origin": "http://evil.example"}).status_code == 403


def test_bad_paths_get_one_line_errors(served: Any) -> None:
    client, _ = served
    missing = client.get("/sakur4/api/projects/1/sessions/nobody")
    assert missing.status_code == 404
    assert "no receipts for session 'nobody'" in missing.json()["error"]["message"]
    assert client.get("/sakur4/api/projects/77/sessions/x").status_code == 404
    assert client.get("/sakur4/api/projects/x1/sessions/x").status_code == 400
    assert client.get("/sakur4/static/../app.py").status_code == 404
    assert client.get("/sakur4/static/other.js").status_code == 404


def test_static_files_ship_in_the_package(served: Any) -> None:
    client, _ = served
    js = client.get("/sakur4/static/dashboard.js")
    assert js.headers["content-type"].startswith("text/javascript")
    assert "fetch(main.dataset.api" in js.text
    assert client.get("/sakur4/static/dashboard.css").text.startswith("/* Sakur4 dashboard")


# -- issue 31, item 6: every screen tells the truth -------------------------------------


def _unanswered(**kw: Any) -> dict[str, Any]:
    return {
        "cache_verdict": "unverifiable",
        "server_cached": None,
        "server_processed": None,
        "prefill_ms": None,
        **kw,
    }


def test_an_event_only_where_something_changed() -> None:
    billing = {"kind": "billing-header", "saved_predicted": 0, "saved_confirmed": 0}
    moved = {"kind": "moved-reminder", "saved_predicted": 900, "saved_confirmed": None}
    assert events_of(receipt(2, 1000, detail={"repairs": [billing]})) == []
    assert events_of(receipt(3, 1000, detail={"repairs": [billing, moved]})) == [
        "repaired: moved-reminder (900 tokens spared)"
    ]
    confirmed = {**moved, "saved_confirmed": 850}
    assert events_of(receipt(4, 1000, detail={"repairs": [confirmed]})) == [
        "repaired: moved-reminder (850 tokens spared)"
    ]


def test_a_turn_in_flight_is_apart_from_the_totals(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    at = {"project_id": project.id}
    write_receipt(store, receipt(1, 900, **at))
    write_receipt(store, receipt(2, 1200, **at))
    write_receipt(store, receipt(3, 1500, **at, **_unanswered()), completed=False)
    data = view.session(store, project, "s")
    t = data["totals"]
    assert t["turns"] == 2
    assert t["in_flight"] == 1
    assert t["reprefilled"] == 200  # 100 + 100: the open turn's 1,500 are not in it
    assert t["unverifiable_turns"] == 0
    assert data["drop_oldest_estimate"]["sakur4_reprefilled"] == 200
    assert [x["outcome"] for x in data["turns"]] == ["reused", "reused", "in flight"]
    html = pages.session_page(data, "/api")
    assert "1 in flight, not counted until the server answers" in html
    assert 'class="bar in-flight"' in html
    assert 'class="receipt in-flight"' in html


def test_prefill_not_reported_is_not_zero(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    # The Anthropic route's server reports no time: never a 0 ms total.
    write_receipt(store, receipt(1, 900, project_id=project.id, prefill_ms=None))
    data = view.session(store, project, "s")
    assert data["totals"]["prefill_ms"] is None
    assert "prefill time</dt><dd>not reported by the server" in pages.session_page(data, "/a")
    write_receipt(store, receipt(2, 950, project_id=project.id, prefill_ms=40.0))
    html = pages.session_page(view.session(store, project, "s"), "/a")
    assert 'data-figure="prefill-ms">40</span> ms (1 turns without a reported time)' in html


def test_sessions_name_their_harness_and_flag_refusals(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    at = {"project_id": project.id}
    write_receipt(store, receipt(1, 900, **at, session="conv-aaa"))
    record_harness(store, project.id, "conv-aaa", "OpenCode 1.0.3")
    write_receipt(store, receipt(1, 9000, **at, session="conv-bbb", verdict="refused"))
    write_receipt(store, receipt(2, 900, **at, session="conv-aaa", detail={"failed": True}))
    data = view.projects(store)
    rows = {s["session"]: s for s in data["projects"][0]["sessions"]}
    assert rows["conv-aaa"]["harness"] == "OpenCode 1.0.3"
    assert rows["conv-bbb"]["harness"] is None
    assert rows["conv-bbb"]["last_refused"] is True
    assert rows["conv-aaa"]["failed"] == 1
    html = pages.index_page(data)
    assert '<td data-col="harness">OpenCode 1.0.3</td>' in html
    assert '<td data-col="harness">unknown</td>' in html
    assert '<span class="flag refused">last turn refused</span>' in html
    assert '<span class="flag failed">1 failed</span>' in html
    page = pages.session_page(view.session(store, project, "conv-bbb"), "/a")
    assert "1 refused, nothing sent" in page
    assert 'class="bar refused"' in page
    # A refused turn sent nothing: no tokens on Sakur4's side of the totals.
    assert view.session(store, project, "conv-bbb")["totals"]["reprefilled"] == 0


def test_the_anthropic_routes_time_to_first_token_is_shown_as_such(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    # llama-server's /v1/messages reports no timings: the gateway's clock, named so.
    first = {"upstream": "messages", "first_token_ms": 1234.5}
    write_receipt(store, receipt(1, 900, project_id=project.id, prefill_ms=None, detail=first))
    data = view.session(store, project, "s")
    assert data["turns"][0]["row"]["prefill ms"] == "1,234 to first token"
    assert data["totals"]["prefill_ms"] is None
    html = pages.session_page(data, "/a")
    assert (
        "not reported by the server; time to first token, measured by the gateway: "
        '<span class="figure" data-figure="first-token-ms">1,234</span> ms over 1 turns'
    ) in html
    assert 'class="bar first-token"' in html
