"""The gateway's adapter between stored messages and the engine's episodes.

The episodes come from a real store (``record_episodes`` then ``session_episodes``,
as the gateway writes and reads them), so the payloads are the ones it keeps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sakur4 import engine
from sakur4.anchors import pin_anchor
from sakur4.episodes import Episode, record_episodes, session_episodes
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.turns.adapter import store_moves, to_engine, to_engine_anchors
from sakur4.vocabulary import Kind, Tier

SESSION = "s"


def stored(store: Store, project: Project, messages: list[dict[str, Any]]) -> list[Episode]:
    record_episodes(store, project.id, SESSION, 1, messages)
    return session_episodes(store, project.id, SESSION)


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_plain_messages_keep_their_ids_tiers_sizes_and_order(store: Store, project: Project):
    eps = stored(
        store,
        project,
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": "Done."},
        ],
    )
    view = to_engine(eps)
    assert [e.id for e in view.episodes] == [e.id for e in eps]
    assert [e.role for e in view.episodes] == ["system", "user", "assistant"]
    assert [e.tokens for e in view.episodes] == [e.tokens for e in eps]
    assert {e.tier for e in view.episodes} == {engine.Tier.LIVE}
    assert {e.kind for e in view.episodes} == {engine.Kind.MESSAGE}
    assert view.store_id == {e.id: e.id for e in eps}


def test_developer_is_placed_and_rendered_as_the_system_prompt(store: Store, project: Project):
    eps = stored(store, project, [{"role": "developer", "content": "Rules."}])
    assert to_engine(eps).episodes[0].role == "system"


def test_an_assistant_turn_with_text_and_calls_becomes_one_episode_each(
    store: Store, project: Project
) -> None:
    eps = stored(
        store,
        project,
        [
            {"role": "user", "content": "Read two files."},
            {
                "role": "assistant",
                "content": "Reading them.",
                "tool_calls": [
                    call("c1", "read_file", '{"path": "a.py"}'),
                    call("c2", "read_file", {"path": "b.py"}),  # arguments as an object
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "print('b')"},
            {"role": "tool", "tool_call_id": "c1", "content": "print('a')"},
        ],
    )
    user, turn, result_b, result_a = eps
    view = to_engine(eps)
    text, call_a, call_b = view.episodes[1:4]
    # The text keeps the store id; each call gets its own id, never a store id.
    assert text.id == turn.id
    assert (text.kind, text.content) == (engine.Kind.MESSAGE, "Reading them.")
    assert max(call_a.id, call_b.id) < 0
    assert call_a.id != call_b.id
    assert (call_a.kind, call_a.tool_name, call_a.tool_call_id) == (
        engine.Kind.TOOL_CALL,
        "read_file",
        "c1",
    )
    assert call_a.content == '{"path": "a.py"}'
    assert call_b.content == '{"path": "b.py"}'  # an object is sent on as its JSON
    # Every piece belongs to the one stored message and moves with it.
    assert {view.store_id[e.id] for e in (text, call_a, call_b)} == {turn.id}
    # A result depends on its own call's piece, whatever order the results came in.
    by_id = {e.id: e for e in view.episodes}
    assert by_id[result_b.id].kind == engine.Kind.TOOL_RESULT
    assert by_id[result_b.id].depends_on == (call_b.id,)
    assert by_id[result_a.id].depends_on == (call_a.id,)
    assert view.episodes[0].id == user.id


def test_calls_without_text_start_at_the_store_id(store: Store, project: Project) -> None:
    eps = stored(
        store,
        project,
        [
            {"role": "user", "content": "Go."},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "ls", "{}")]},
        ],
    )
    first_call = to_engine(eps).episodes[1]
    assert (first_call.id, first_call.kind) == (eps[1].id, engine.Kind.TOOL_CALL)


def test_a_call_without_an_id_gets_one_its_result_cannot_claim(
    store: Store, project: Project
) -> None:
    eps = stored(
        store,
        project,
        [
            {"role": "user", "content": "Go."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "ls"}}],
            },
            {"role": "tool", "tool_call_id": "elsewhere", "content": "a.py"},
        ],
    )
    view = to_engine(eps)
    assert view.episodes[1].tool_call_id == f"call_{eps[1].id}_0"
    assert view.episodes[1].content == "{}"  # no arguments: an empty object
    assert view.episodes[2].depends_on == ()  # no call of that id in the prompt


def test_pinned_messages_are_pinned_in_every_piece(store: Store, project: Project) -> None:
    eps = stored(
        store,
        project,
        [
            {"role": "user", "content": "Go."},
            {"role": "assistant", "content": "x", "tool_calls": [call("c1", "ls", "{}")]},
        ],
    )
    # Pinned by id alone here (no nature keeps its text; the user's words would).
    view = to_engine(eps, pinned=frozenset({eps[1].id}), keep=frozenset())
    assert [e.pinned for e in view.episodes] == [False, True, True]


def test_a_note_is_a_note_and_tiers_come_from_the_store(store: Store, project: Project) -> None:
    eps = stored(store, project, [{"role": "user", "content": "Go."}])
    note = replace(eps[0], id=99, kind=Kind.NOTE, tier=Tier.MASKED)
    (out,) = to_engine([note]).episodes
    assert (out.kind, out.tier) == (Kind.NOTE, Tier.MASKED)


def test_a_payload_that_is_not_json_is_read_as_its_content(store: Store, project: Project):
    eps = stored(store, project, [{"role": "assistant", "content": "plain"}])
    damaged = replace(eps[0], payload="{not json")
    (out,) = to_engine([damaged]).episodes
    assert (out.kind, out.content) == (engine.Kind.MESSAGE, "plain")


def test_a_message_takes_the_most_shown_tier_of_its_pieces(store: Store, project: Project):
    eps = stored(
        store,
        project,
        [
            {"role": "user", "content": "Go."},
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [call("c1", "read", "{}"), call("c2", "read", "{}")],
            },
        ],
    )
    view = to_engine(eps)
    user, text, c1, c2 = view.episodes
    masked = engine.Tier.MASKED
    # One piece masked, the others live: the stored message stays live.
    assert store_moves(view, {c1.id: masked}) == {text.id: Tier.LIVE}
    # Every piece masked: so is the message.
    assert store_moves(view, {text.id: masked, c1.id: masked, c2.id: masked}) == {text.id: masked}
    # Messages nothing moved are not written.
    assert store_moves(view, {user.id: engine.Tier.REFERENCED}) == {user.id: Tier.REFERENCED}
    assert store_moves(view, {}) == {}


def test_anchors_are_sized_by_the_counter_given(store: Store, project: Project) -> None:
    a = pin_anchor(store, project.id, "never touch prod", priority=3)
    (out,) = to_engine_anchors([a], lambda text: len(text.split()))
    assert (out.id, out.text, out.priority, out.tokens) == (a.id, "never touch prod", 3, 3)


def test_a_later_turn_reuses_the_pieces_of_unchanged_episodes_and_rebuilds_changed_ones(
    store: Store, project: Project
) -> None:
    eps = stored(
        store,
        project,
        [
            {"role": "user", "content": "Read a."},
            {"role": "assistant", "content": "", "tool_calls": [call("c1", "read", "{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": "a = 1\n" * 40},
        ],
    )
    first = to_engine(eps)
    # The tool result steps to Masked: a new stored episode under the same id.
    moved = [*eps[:2], replace(eps[2], tier=Tier.MASKED)]
    later = to_engine(moved, previous=first)
    fresh = to_engine(moved)
    assert later.episodes == fresh.episodes
    assert later.store_id == fresh.store_id
    assert later.episodes[0] is first.episodes[0]  # lent, not built again
    assert later.episodes[1] is first.episodes[1]
    assert later.episodes[2] is not first.episodes[2]
    assert later.episodes[2].tier is Tier.MASKED
    assert later.episodes[2].depends_on == (first.episodes[1].id,)
    # Pinning is part of what a piece is: the same stored episode pinned is built again.
    pinned = to_engine(moved, frozenset({eps[1].id}), previous=later)
    assert pinned.episodes[1].pinned
    assert not later.episodes[1].pinned
