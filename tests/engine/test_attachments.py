"""A turn's attachments fold when the turn cannot fit with them (issue 41).

The current turn is protected: the model has not read it. A user message's attached
or pasted file is content, not the user's words; the adapter gives the words and the
harness's instructions ``pinned`` (what keeps its text) and leaves an attachment's
slice unpinned. Kept whole, a turn whose attachments outgrow the window was refused,
and so was every turn after it that carried them. Now the attachment folds (Live to
Masked, a line naming ``open_fold``), only when the turn cannot fit otherwise.
"""

from __future__ import annotations

from sakur4.engine import Episode, Tier, Verdict, plan_turn

from .sessions import Session, call, count, message, result


def history() -> list[Episode]:
    return [
        message(0, "system", 600, pinned=True),
        message(1, "user", 30, pinned=True),
        call(2, "a"),
        result(3, "a", 400, 2),
        message(4, "assistant", 40),
    ]


def asked(first: int, attached: int) -> list[Episode]:
    """A user message as its slices: the words, a file attached to them, more words."""
    return [
        message(first, "user", 20, pinned=True),
        message(first + 1, "user", attached, joins=True),
        message(first + 2, "user", 15, pinned=True, joins=True),
    ]


def test_an_attachment_larger_than_the_window_folds_and_the_words_stay() -> None:
    s = Session(window=8_192)
    s.warm(history())
    plan, prompt = s.turn(asked(10, 20_000))
    # Before: refused ("the prompt needs 21,… tokens after every step it can take").
    assert plan.verdict is not Verdict.REFUSED, plan.reason
    assert plan.moves[11] is Tier.MASKED
    assert 10 not in plan.moves
    assert 12 not in plan.moves
    assert "unread attachment(s) folded" in plan.reason
    last = prompt.messages[-1]
    assert "open_fold(11)" in last["content"]
    assert s.episodes[-3].content in last["content"]  # the user's words, whole
    assert s.episodes[-1].content in last["content"]
    assert plan.new_tokens <= s.window


def test_an_attachment_that_fits_the_window_stays_live() -> None:
    s = Session(window=8_192)
    s.warm(history())
    plan, prompt = s.turn(asked(10, 5_500))  # above the trigger, inside the window
    assert plan.pressure >= 0.75
    assert plan.verdict is not Verdict.REFUSED
    assert 11 not in plan.moves
    assert s.episodes[-2].content in prompt.messages[-1]["content"]


def test_the_words_alone_too_large_are_still_refused() -> None:
    s = Session(window=8_192)
    s.warm(history())
    plan, _ = s.turn([message(10, "user", 20_000, pinned=True)])
    assert plan.verdict is Verdict.REFUSED


def test_with_nothing_cached_the_attachment_folds_too() -> None:
    # A new session, or one whose server state was forgotten (after a failed turn).
    s = Session(window=8_192)
    s.episodes = [*history(), *asked(10, 20_000)]
    plan = s.plan()
    assert plan.verdict is not Verdict.REFUSED, plan.reason
    assert plan.moves[11] is Tier.MASKED


def test_a_turn_of_unread_tool_results_is_not_an_attachment() -> None:
    # What a tool returned this turn is read by the model next: not folded unread.
    s = Session(window=8_192)
    s.warm(history())
    plan, _ = s.turn(
        [message(10, "user", 20, pinned=True), call(11, "b"), result(12, "b", 20_000, 11)]
    )
    assert plan.verdict is Verdict.REFUSED


def test_with_the_estimates_short_the_fold_is_measured_not_refused() -> None:
    # The gateway measured a rendering over the window (code tokenizes denser than
    # characters/4) and plans again: what the fold leaves is measured, not refused on
    # the estimate (the gateway refuses on the measured figure if it does not fit).
    s = Session(window=8_192)
    s.warm(history())
    s.episodes.extend(asked(10, 6_000))
    plan = plan_turn(
        s.episodes,
        s.settings,
        anchors=[],
        layout=s.layout,
        checkpoints=s.resume_points(),
        count=count,
        underestimate=8_000,
    )
    # Before: refused ("the prompt needs 9,… tokens after every step it can take").
    assert plan.verdict is Verdict.STEPPING, plan.reason
    assert plan.moves[11] is Tier.MASKED
    assert "measured after these steps" in plan.reason
