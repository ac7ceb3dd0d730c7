"""The memory commands end to end through the CLI: recall, remember, episodes,
open-fold, embed, anchor, atlas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sakur4.cli import cli
from sakur4.episodes import record_episodes, set_tiers
from sakur4.ledger.index import index_project
from sakur4.store import open_store
from sakur4.store.projects import add_project
from sakur4.vocabulary import Tier


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    base = ["--store", str(tmp_path / "s.db"), "--project", str(tmp_path / "p")]
    result = CliRunner().invoke(cli, [*base, *args], env=env)
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "p").mkdir()
    return tmp_path / "p"


def test_remember_then_recall_lexical(tmp_path: Path, root: Path) -> None:
    assert run(tmp_path, "remember", "The store lives in ~/.local/share").exit_code == 0
    r = run(tmp_path, "recall", "where does the store live")
    assert r.exit_code == 0, r.output
    assert "recall: lexical (no embedder configured)" in r.output
    assert "The store lives in" in r.output
    data = json.loads(run(tmp_path, "recall", "store", "--json").output)
    assert data["hits"][0]["episode"]["kind"] == "note"
    assert data["hits"][0]["bm25"] < 0
    assert data["hits"][0]["vector_rank"] is None


def test_recall_hybrid_with_the_local_embedder(tmp_path: Path, root: Path) -> None:
    env = {"SAKUR4_EMBEDDER": "local"}
    run(tmp_path, "remember", "The SQLite file was locked by another process.", env=env)
    run(tmp_path, "remember", "Rust impl blocks become symbols.", env=env)
    r = run(tmp_path, "recall", "database busy", "--json", env=env)
    data = json.loads(r.output)
    assert data["mode"] == "hybrid (all-MiniLM-L6-v2)"
    assert "locked" in data["hits"][0]["episode"]["content"]
    assert data["hits"][0]["vector_rank"] == 1


def test_episodes_open_fold_and_embed(tmp_path: Path, root: Path) -> None:
    s = open_store(tmp_path / "s.db")
    p = add_project(s, root)
    ids = record_episodes(s, p.id, "s1", 1, [{"role": "user", "content": "long tool output"}])
    set_tiers(s, p.id, {ids[0]: Tier.ARCHIVED})
    s.close()
    r = run(tmp_path, "episodes", "s1")
    assert "archived" in r.output
    assert run(tmp_path, "open-fold", str(ids[0])).output.strip() == "long tool output"
    r = run(tmp_path, "open-fold", "999")
    assert r.exit_code == 1
    assert "no episode 999 in this project" in r.output
    r = run(tmp_path, "embed")
    assert r.exit_code == 1
    assert "no embedder configured" in r.output
    r = run(tmp_path, "embed", env={"SAKUR4_EMBEDDER": "local"})
    assert "embedded 1 episode(s) with all-MiniLM-L6-v2" in r.output


def test_anchor_pin_list_unpin(tmp_path: Path, root: Path) -> None:
    assert "anchor 1 pinned" in run(tmp_path, "anchor", "pin", "Never push to main").output
    run(tmp_path, "anchor", "pin", "Tests first", "--priority", "5")
    listed = json.loads(run(tmp_path, "anchor", "list", "--json").output)
    assert [a["text"] for a in listed] == ["Tests first", "Never push to main"]
    assert run(tmp_path, "anchor", "unpin", "1").exit_code == 0
    r = run(tmp_path, "anchor", "unpin", "1")
    assert r.exit_code == 1
    assert "already unpinned" in r.output


def test_atlas_write_and_stale_read(tmp_path: Path, root: Path) -> None:
    src = root / "m.py"
    src.write_text("def f(a):\n    return a\n")
    s = open_store(tmp_path / "s.db")
    index_project(s, add_project(s, root))
    r = run(tmp_path, "atlas", "write", "m.py", "m.f", "Returns its argument.")
    assert r.exit_code == 0, r.output
    r = run(tmp_path, "atlas", "write", "m.py", "m.g", "No such symbol.")
    assert r.exit_code == 1
    assert "no valid anchor" in r.output
    src.write_text("def f(a, b):\n    return a\n")
    index_project(s, add_project(s, root))
    s.close()
    r = run(tmp_path, "atlas", "read")
    assert "[STALE] m.py:m.f" in r.output
    assert "current: def f(a, b):" in r.output
    data = json.loads(run(tmp_path, "atlas", "read", "m.py", "--json").output)
    assert data[0]["label"] == "[STALE]"


def test_an_episode_has_one_form_on_every_surface(tmp_path: Path, root: Path) -> None:
    # Issue 38: the CLI, the MCP tools and the gateway's fold route each wrote their own
    # dict (different fields); all three now show Episode.as_dict.
    from starlette.testclient import TestClient

    from sakur4.episodes import open_fold
    from sakur4.gateway.app import create_app
    from sakur4.mcp.tools.episodes import EpisodeOut
    from sakur4.settings import Settings

    s = open_store(tmp_path / "s.db")
    p = add_project(s, root)
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "x" * 50},
    ]
    ids = record_episodes(s, p.id, "s1", 1, messages)
    e = open_fold(s, p.id, ids[-1])
    s.close()
    form = e.as_dict()
    assert form["tool_call_id"] == "c1"
    assert form["depends_on"]  # a result needs its call
    cli_form = json.loads(run(tmp_path, "open-fold", str(ids[-1]), "--json").output)
    assert cli_form == form
    assert EpisodeOut.of(e).model_dump() == form
    cut = EpisodeOut.of(e, max_chars=10).model_dump()
    assert cut == e.as_dict(max_chars=10)
    assert cut["truncated"] is True
    settings = Settings.load(
        store=tmp_path / "s.db", project=root, backend="http://127.0.0.1:9", gateway_port=0
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        r = client.get(f"/sakur4/folds/{ids[-1]}", headers={"X-Sakur4-Project": str(root)})
    assert r.status_code == 200, r.text
    assert r.json() == form
