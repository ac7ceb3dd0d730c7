"""The session-state row and its lease (issue 39 item 4), on both engines: one gateway
holds a session's turn at a time, a lease that ran out is taken over, and a state is
written only by the gateway that still holds the lease, one version at a time."""

from __future__ import annotations

from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.store.session_states import (
    HeldElsewhere,
    StoredSession,
    claim_session,
    release_session,
    renew_session,
    save_session_in,
)


def _save(store: Store, project: Project, holder: str, version: int, state: str) -> bool:
    with store.tx() as c:
        return save_session_in(c, project.id, "s", holder, version, state)


def test_one_gateway_holds_a_session_until_it_writes_the_turns_state(
    store: Store, project: Project
) -> None:
    assert claim_session(store, project.id, "s", "A") == StoredSession(0, None)
    held = claim_session(store, project.id, "s", "B")
    assert isinstance(held, HeldElsewhere)
    assert held.holder == "A"
    assert held.seconds > 0
    assert claim_session(store, project.id, "s", "A") == StoredSession(0, None)  # its own
    assert _save(store, project, "A", 0, '{"turn": 1}')
    assert claim_session(store, project.id, "s", "B") == StoredSession(1, '{"turn": 1}')
    assert renew_session(store, project.id, "s", "B")
    assert not renew_session(store, project.id, "s", "A")
    assert _save(store, project, "B", 1, '{"turn": 2}')
    assert claim_session(store, project.id, "s", "A") == StoredSession(2, '{"turn": 2}')
    # Another session of the project is held apart.
    assert claim_session(store, project.id, "t", "B") == StoredSession(0, None)


def test_a_lease_run_out_is_taken_over_and_its_late_write_refused(
    store: Store, project: Project
) -> None:
    """A gateway killed (or stalled) mid-turn: its lease runs out, another takes the
    session; the first one's write, if it comes, changes nothing."""
    claim_session(store, project.id, "s", "A", lease=-1.0)  # already run out
    assert claim_session(store, project.id, "s", "B") == StoredSession(0, None)
    assert not _save(store, project, "A", 0, '{"turn": "stale"}')
    assert _save(store, project, "B", 0, '{"turn": 1}')
    assert claim_session(store, project.id, "s", "A") == StoredSession(1, '{"turn": 1}')


def test_a_release_gives_the_session_up_without_a_new_version(
    store: Store, project: Project
) -> None:
    claim_session(store, project.id, "s", "A")
    release_session(store, project.id, "s", "B")  # not B's: nothing changes
    assert isinstance(claim_session(store, project.id, "s", "B"), HeldElsewhere)
    release_session(store, project.id, "s", "A")
    assert claim_session(store, project.id, "s", "B") == StoredSession(0, None)
