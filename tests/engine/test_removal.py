"""Removal on a server that shifts the KV (profile ShiftFirst, issue 40 item 5).

The toy server here is llama-server's ``--cache-reuse`` loop over the toy tokens
(:func:`shifted_reuse`): after the common prefix, cached runs of at least
:data:`~sakur4.engine.removal.SHIFT_RUN` tokens that match the prompt at the current
position are shifted into place; the first position no such run matches ends it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sakur4.engine import Episode, Tier, choose_profile
from sakur4.engine.profiles import SHIFT_FIRST, Profile
from sakur4.engine.removal import SHIFT_RUN, Unit, price
from sakur4.errors import InputError

from .sessions import Session, call, message, result


def shifted_reuse(cached: Sequence[str], tokens: Sequence[str], chunk: int = SHIFT_RUN) -> int:
    """Tokens the server reuses (the loop of llama-server's update_slots, as
    bench/simserver.py models it)."""
    n_past = 0
    while n_past < min(len(cached), len(tokens)) and cached[n_past] == tokens[n_past]:
        n_past += 1
    head_c = head_p = n_past
    while head_c < len(cached) and head_p < len(tokens):
        n = 0
        while (
            head_c + n < len(cached)
            and head_p + n < len(tokens)
            and cached[head_c + n] == tokens[head_p + n]
        ):
            n += 1
        if n >= chunk:
            n_past += n
            head_c += n
            head_p += n
        else:
            head_c += 1
    return n_past


def answered_turn(first: int, size: int) -> list[Episode]:
    """A request (pinned: the user's words stay), a read of ``size`` tokens, the answer."""
    return [
        message(first, "user", 30, pinned=True),
        call(first + 1, f"c{first}"),
        result(first + 2, f"c{first}", size, first + 1),
        message(first + 3, "assistant", 60),
    ]


def session(profile: Profile) -> Session:
    """Five answered turns, 5,582 tokens: below ShiftFirst's drain line at 7,300
    (5,621), so a request and a call cross it and a longer request the trigger (5,840)."""
    s = Session(window=7300, profile=profile)
    s.warm([message(0, "system", 400)])
    for k in range(5):
        s.turn(answered_turn(10 + 10 * k, 900))
    return s


def test_the_probes_shifting_server_gets_shift_first() -> None:
    p = choose_profile("shifting")
    assert (p.name, p.drain) == ("shift-first", SHIFT_FIRST.drain)
    assert choose_profile("detected").drain is None
    assert choose_profile("detected", "shift-first").drain is not None


def test_a_drain_line_outside_target_and_trigger_is_refused() -> None:
    with pytest.raises(InputError, match="drain"):
        Profile("x", 0.75, 0.55, drain=0.8)


def test_a_short_kept_run_between_two_removals_ends_the_shifting() -> None:
    one = Unit(100, 300, (1,), (200,), 200)
    two = Unit(340, 600, (2,), (260,), 260)  # 40 tokens kept between them: a request
    assert price([one], 2000) == 100 + (2000 - 300)
    assert price([one, two], 2000) == 100
    assert price([one], 250) == 100  # the prompt changes inside the unit anyway


@pytest.mark.parametrize(
    "request_tokens",
    [30, 400, 1300],
    ids=[
        "below the trigger: drained",
        "at the trigger: removed, not folded",
        "one unit now, left above the trigger, where two would end the shifting",
    ],
)
def test_on_a_shifting_server_the_oldest_turn_leaves_whole_and_the_rest_is_shifted(
    request_tokens: int,
) -> None:
    s = session(SHIFT_FIRST)
    before = list(s.sent)
    tiers_before = s.tiers()
    plan, _ = s.turn([message(60, "user", request_tokens, pinned=True), call(61, "c60")])
    assert (plan.pressure >= SHIFT_FIRST.trigger) == (request_tokens > 100)
    removed = [st for st in plan.steps if st.to_tier is Tier.ARCHIVED]
    # The oldest answered turn's call, read and answer go straight to Archived (not a
    # rung at a time); every request stays.
    assert {st.episode_id for st in removed} == {11, 12, 13}
    assert all(tiers_before[st.episode_id] is Tier.LIVE for st in removed)
    assert all(s.tiers()[i] is Tier.LIVE for i in (10, 20, 30, 40, 50, 60))
    # Pure removal: the new prompt is the old one with one span taken out, then new text.
    reused = shifted_reuse(before, s.sent)
    assert reused == plan.reused
    assert reused > len(before) - 1100  # all but the removed ~980 tokens
    # The receipt's cut is where the reuse ends: past the removed span.
    assert plan.chosen_cut == plan.reused


def test_the_same_turn_folded_in_place_re_processes_what_follows_the_fold() -> None:
    shifting, folding = session(SHIFT_FIRST), session(choose_profile("detected"))
    for s in (shifting, folding):
        s.sent_before = list(s.sent)  # type: ignore[attr-defined]
        s.turn([message(60, "user", 400, pinned=True), call(61, "c60")])
    kept = [
        shifted_reuse(s.sent_before, s.sent)  # type: ignore[attr-defined]
        for s in (shifting, folding)
    ]
    assert kept[0] > kept[1] + 2000
