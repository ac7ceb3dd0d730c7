"""Recording a session, reading it back, tiers, folds and tombstones."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sakur4.episodes import (
    open_fold,
    record_episodes,
    remember,
    session_episodes,
    set_tiers,
)
from sakur4.episodes.stream import fetch_episodes, refresh_episodes
from sakur4.errors import InputError, NotFound
from sakur4.store import Store
from sakur4.store.projects import Project, add_project
from sakur4.vocabulary import Tier


def history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Why does the parser fail on decorators?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "parser.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def parse(src): ..." * 50},
        {"role": "assistant", "content": "The decorator branch skips the @ token."},
    ]


def test_round_trip_in_order_with_kinds_and_payload(store: Store, project: Project) -> None:
    ids = record_episodes(store, project.id, "s1", 1, history())
    eps = session_episodes(store, project.id, "s1")
    assert [e.id for e in eps] == ids
    assert [e.seq for e in eps] == [0, 1, 2, 3, 4]
    assert [e.kind for e in eps] == ["message", "message", "tool_call", "tool_result", "message"]
    call, result = eps[2], eps[3]
    assert call.tool_name == "read_file"
    assert call.tool_call_id == "call_1"
    assert 'read_file({"path": "parser.py"})' in (call.content or "")
    assert result.depends_on == (call.id,)
    assert json.loads(result.payload or "") == history()[3]
    assert all(e.tier is Tier.LIVE for e in eps)
    assert all(e.project_id == project.id for e in eps)


def test_resent_history_is_recognised(store: Store, project: Project) -> None:
    first = record_episodes(store, project.id, "s1", 1, history()[:3])
    again = record_episodes(store, project.id, "s1", 2, history())
    assert again[:3] == first
    assert len(session_episodes(store, project.id, "s1")) == 5
    n = store.query("SELECT count(*) FROM episodic_stream")[0][0]
    assert n == 5


def test_a_message_changed_in_place_is_a_new_version(store: Store, project: Project) -> None:
    h = history()
    first = record_episodes(store, project.id, "s1", 1, h)
    h[0] = {"role": "system", "content": "You are a coding agent. Date: tomorrow."}
    second = record_episodes(store, project.id, "s1", 2, h)
    assert second[0] != first[0]
    assert second[1:] == first[1:]
    eps = session_episodes(store, project.id, "s1")
    assert [e.id for e in eps] == second  # the transcript shows the newest version
    assert open_fold(store, project.id, first[0]).content == "You are a coding agent."


def test_malformed_message_stores_nothing(store: Store, project: Project) -> None:
    with pytest.raises(InputError, match="role"):
        record_episodes(store, project.id, "s1", 1, [*history(), {"content": "no role"}])
    assert session_episodes(store, project.id, "s1") == []


def test_notes_are_kept_apart_from_the_transcript(store: Store, project: Project) -> None:
    record_episodes(store, project.id, "s1", 1, history())
    note = remember(store, project.id, "The parser lives in src/parse.py", session="s1")
    assert note not in [e.id for e in session_episodes(store, project.id, "s1")]
    got = open_fold(store, project.id, note)
    assert got.kind == "note"
    assert got.content == "The parser lives in src/parse.py"
    # A note does not take a message's place: the next resend records nothing new.
    record_episodes(store, project.id, "s1", 2, history())
    assert store.query("SELECT count(*) FROM episodic_stream")[0][0] == 6
    with pytest.raises(InputError):
        remember(store, project.id, "   ")


def test_folded_episodes_open_in_full(store: Store, project: Project) -> None:
    ids = record_episodes(store, project.id, "s1", 1, history())
    full = session_episodes(store, project.id, "s1")[3].content
    for tier in (Tier.MASKED, Tier.REFERENCED, Tier.ARCHIVED):
        set_tiers(store, project.id, {ids[3]: tier})
        got = open_fold(store, project.id, ids[3])
        assert got.tier is tier
        assert got.content == full


def test_drop_keeps_a_tombstone(store: Store, project: Project) -> None:
    ids = record_episodes(
        store, project.id, "s1", 1, history(), droppable_kinds={"tool_result", "tool_call"}
    )
    set_tiers(store, project.id, {ids[3]: Tier.DROPPED})
    row = store.query("SELECT tier, content, payload FROM episodic_stream WHERE id = ?", (ids[3],))
    assert tuple(row[0]) == ("dropped", None, None)
    assert [e.id for e in session_episodes(store, project.id, "s1")] == ids  # the row stays
    with pytest.raises(NotFound, match="dropped"):
        open_fold(store, project.id, ids[3])
    with pytest.raises(InputError, match="content is gone"):
        set_tiers(store, project.id, {ids[3]: Tier.LIVE})


def test_drop_gate(store: Store, project: Project) -> None:
    ids = record_episodes(store, project.id, "s1", 1, history(), droppable_kinds={"tool_call"})
    with pytest.raises(InputError, match="not droppable"):
        set_tiers(store, project.id, {ids[1]: Tier.DROPPED})
    # The call cannot go while its result is Live...
    with pytest.raises(InputError, match=rf"Live episode\(s\) \[{ids[3]}\] depend on it"):
        set_tiers(store, project.id, {ids[2]: Tier.DROPPED})
    assert open_fold(store, project.id, ids[2]).content  # refused means untouched
    # ...and can once the result leaves Live in the same change.
    set_tiers(store, project.id, {ids[3]: Tier.ARCHIVED, ids[2]: Tier.DROPPED})
    assert session_episodes(store, project.id, "s1")[2].tier is Tier.DROPPED


def test_failed_change_changes_nothing(store: Store, project: Project) -> None:
    ids = record_episodes(store, project.id, "s1", 1, history())
    with pytest.raises(InputError):
        set_tiers(store, project.id, {ids[0]: Tier.MASKED, ids[1]: Tier.DROPPED})
    assert session_episodes(store, project.id, "s1")[0].tier is Tier.LIVE
    with pytest.raises(InputError, match="unknown tier"):
        set_tiers(store, project.id, {ids[0]: "gone"})  # type: ignore[dict-item]


def test_other_projects_episodes_are_not_found(
    store: Store, project: Project, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    other = add_project(store, tmp_path / "other")
    ids = record_episodes(store, other.id, "s1", 1, history())
    assert session_episodes(store, project.id, "s1") == []
    with pytest.raises(NotFound, match="no episode"):
        open_fold(store, project.id, ids[0])
    with pytest.raises(NotFound):
        set_tiers(store, project.id, {ids[0]: Tier.MASKED})
    assert open_fold(store, other.id, ids[0]).tier is Tier.LIVE


def test_tokens_are_counted_with_the_given_counter(store: Store, project: Project) -> None:
    ids = record_episodes(store, project.id, "s1", 1, history()[:2], count_tokens=lambda t: 7)
    assert {e.tokens for e in session_episodes(store, project.id, "s1")} == {7}
    assert len(ids) == 2


# -- a turn touches only its new messages (issue 17) ----------------------------------


def test_known_messages_are_not_hashed_or_looked_up_again(store: Store, project: Project) -> None:
    msgs = history()
    ids = record_episodes(store, project.id, "s", 1, msgs)
    # The caller vouches for messages 0-3 (the same message at the same place as its
    # last turn): their ids come back as given, without being read or validated again
    # (a message that would not validate shows it), and only the new one is stored.
    vouched: list[Any] = [*msgs[:3], "not a message", *msgs[4:]]
    grown = [*vouched, {"role": "user", "content": "Fix it."}]
    again = record_episodes(store, project.id, "s", 2, grown, known=ids[:4])
    assert again[:5] == ids
    assert len(session_episodes(store, project.id, "s")) == 6
    # Without the caller's word the same messages are found by their hashes.
    assert record_episodes(store, project.id, "s", 3, [*msgs, grown[-1]]) == again
    with pytest.raises(InputError):
        record_episodes(store, project.id, "s", 4, grown)


def test_refresh_reads_again_only_what_changed(store: Store, project: Project) -> None:
    ids = record_episodes(store, project.id, "s", 1, history())
    first = fetch_episodes(store, project.id, ids)
    # A cached episode whose tier is unchanged is the cached object itself (its
    # content is not read again: a marker in the cache shows it).
    marked = {i: replace(e, content="cached") for i, e in first.items()}
    set_tiers(store, project.id, {ids[3]: Tier.MASKED})
    got = refresh_episodes(store, project.id, [*ids, 10**9], marked)
    assert sorted(got) == sorted(ids)  # an id not in the store is absent, as with fetch
    assert [got[i].content for i in ids if i != ids[3]] == ["cached"] * 4
    assert got[ids[3]].tier is Tier.MASKED
    assert got[ids[3]].content == first[ids[3]].content  # read again: its tier changed
