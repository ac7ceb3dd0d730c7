"""The cut planner on scripted sessions: where it cuts, what steps, what it reports."""

from __future__ import annotations

from dataclasses import replace

from sakur4.engine import Anchor, Episode, Kind, Tier, Verdict, choose_profile

from .sessions import Session, call, count, message, result, start_of, text_of


def rounds(first_id: int, n: int, size: int) -> list[Episode]:
    """``n`` answered tool rounds: call, result of ``size`` tokens, a short reply."""
    out: list[Episode] = []
    i = first_id
    for _ in range(n):
        out += [call(i, f"c{i}"), result(i + 1, f"c{i}", size, i), message(i + 2, "assistant", 15)]
        i += 3
    return out


def opening() -> list[Episode]:
    return [message(0, "system", 50), message(1, "user", 30)]


def changed(plan: object) -> list[tuple[int, Tier]]:
    """The steps that change the prompt's bytes (free steps render the same text)."""
    return [
        (st.episode_id, st.to_tier)
        for st in plan.steps  # type: ignore[attr-defined]
        if st.tokens_after != st.tokens_before or st.to_tier >= Tier.ARCHIVED
    ]


def assert_prefix_kept(before: list[str], after: list[str], upto: int) -> None:
    assert upto <= len(before)
    assert after[:upto] == before[:upto]


def test_below_the_trigger_nothing_steps_and_the_whole_cache_is_reused() -> None:
    s = Session(window=100_000)
    s.warm([*opening(), *rounds(2, 3, 400)])
    end = len(s.sent)
    plan, _ = s.turn([message(100, "user", 30)])
    assert plan.verdict is Verdict.FITS
    assert plan.steps == ()
    assert (plan.chosen_cut, plan.requested_cut) == (None, None)
    assert plan.reused == end
    assert plan.reprefill == plan.new_tokens - end


def test_an_answered_bulky_result_lying_late_is_masked_below_the_trigger() -> None:
    s = Session(window=100_000, live_results=0)
    s.warm([*opening(), call(2, "a"), result(3, "a", 3000, 2)])
    before = s.sent
    plan, _ = s.turn([message(4, "assistant", 15), call(5, "b"), result(6, "b", 50, 5)])
    assert plan.verdict is Verdict.FITS
    # The result changes; its call and the short reply step too, but render as
    # themselves (a stub would be longer), so their bytes do not move.
    assert changed(plan) == [(3, Tier.MASKED)]
    assert {st.episode_id for st in plan.steps} == {2, 3, 4}
    assert max(st.reclaimed for st in plan.steps) > 2900
    assert plan.chosen_cut is not None
    assert_prefix_kept(before, s.sent, plan.chosen_cut)


def test_it_waits_while_much_of_the_cache_follows_the_result() -> None:
    s = Session(window=100_000, live_results=0)
    s.warm(
        [
            *opening(),
            call(2, "a"),
            result(3, "a", 1000, 2),
            message(4, "assistant", 20),
            message(5, "user", 5000),  # a long paste: nothing folds it below the trigger
            message(6, "assistant", 20),
        ]
    )
    plan, _ = s.turn([message(8, "user", 30)])
    assert changed(plan) == []


def test_answered_results_fold_together_when_little_lies_between_them() -> None:
    s = Session(window=100_000, live_results=0, tidy_budget=256)
    s.warm(
        [
            *opening(),
            call(2, "a"),
            result(3, "a", 1000, 2),
            message(4, "assistant", 20),
            call(5, "b"),
            result(6, "b", 5000, 5),
            message(7, "assistant", 20),
        ]
    )
    plan, _ = s.turn([message(8, "user", 30)])
    # Folding the newest is nearly free; with it folded, little follows the older one.
    assert changed(plan) == [(3, Tier.MASKED), (6, Tier.MASKED)]


def test_material_after_it_that_the_server_has_not_seen_costs_nothing() -> None:
    # The new 5,000-token result is processed this turn whatever happens.
    s = Session(window=100_000, live_results=0)
    s.warm([*opening(), call(2, "a"), result(3, "a", 1000, 2), message(4, "assistant", 20)])
    plan, _ = s.turn([call(5, "b"), result(6, "b", 5000, 5), message(7, "assistant", 20)])
    # Both: the new result was answered in the same request, and was never cached.
    assert [e for e, _ in changed(plan)] == [3, 6]


def test_it_waits_while_the_result_is_working_memory() -> None:
    s = Session(window=100_000, live_results=1)
    s.warm([*opening(), call(2, "a"), result(3, "a", 3000, 2)])
    plan, _ = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert plan.steps == ()


def test_a_zero_tidy_budget_takes_no_step_that_costs_re_processing() -> None:
    s = Session(window=100_000, live_results=0, tidy_budget=0)
    s.warm([*opening(), call(2, "a"), result(3, "a", 3000, 2)])
    plan, _ = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert plan.steps == ()


def test_a_gateway_that_knows_nothing_the_server_holds_folds_nothing_below_the_trigger() -> None:
    # A fresh gateway (wrap's, a restart) facing a conversation the server may still
    # hold: with no layout every fold looked free, and re-processed what was cached
    # (bench/fresh_gateway.py: 2,654 tokens against a warm gateway's 1,318, issue 41).
    s = Session(window=100_000, live_results=0, tidy_budget=256)
    s.warm([*opening(), call(2, "a"), result(3, "a", 1000, 2), message(4, "assistant", 20)])
    s.layout = None  # the same conversation, seen by a new gateway
    plan, _ = s.turn([message(5, "user", 30)])
    assert plan.steps == ()
    s.layout = None
    s.warm()  # and once it knows the layout, the answered result folds as before
    plan, _ = s.turn([message(6, "user", 30)])
    assert changed(plan) == [(3, Tier.MASKED)]


def pressured(checkpoints: str = "ring", **kw: object) -> tuple[Session, list[str]]:
    """A warm session of 30 tool rounds, then a new question that crosses the trigger."""
    s = Session(window=24_000, checkpoints=checkpoints, **kw)  # type: ignore[arg-type]
    s.warm([*opening(), *rounds(2, 30, 600)])
    return s, s.sent


def test_at_the_trigger_it_cuts_at_a_checkpoint_at_or_before_the_requested_cut() -> None:
    s, before = pressured(ring_extra=(10, 40, 70))
    points = set(s.resume_points().positions) | {0}
    old = s.layout
    assert old is not None
    plan, _ = s.turn([message(200, "user", 30)])
    moved = {e for e, _ in changed(plan)}
    assert plan.pressure >= 0.75
    assert plan.verdict is Verdict.RECLAIMED
    assert plan.new_tokens <= plan.target_tokens
    assert plan.requested_cut is not None
    assert plan.chosen_cut is not None
    assert plan.chosen_cut in points
    assert plan.chosen_cut <= plan.requested_cut
    assert plan.reused == plan.chosen_cut
    for st in plan.steps:
        where = start_of(old, st.episode_id)
        assert where is not None
        assert where >= plan.chosen_cut or st.episode_id not in moved  # free steps lie anywhere
    assert_prefix_kept(before, s.sent, plan.chosen_cut)
    assert len(s.sent) / s.window <= plan.target_tokens / s.window + 0.001


def test_everything_after_the_cut_steps_and_the_prompt_ends_below_the_trigger() -> None:
    s, _ = pressured(checkpoints="every")
    old = s.layout
    assert old is not None
    plan, _ = s.turn([message(200, "user", 30)])
    assert plan.chosen_cut is not None
    stepped = {st.episode_id for st in plan.steps}
    protected = {0, 200}  # the harness prompt, the new question
    bytes_moved = {e for e, _ in changed(plan)}
    for e in s.episodes:
        where = start_of(old, e.id)
        if e.id in protected or where is None or where < plan.chosen_cut:
            assert e.id not in bytes_moved
        elif e.tokens > 100:  # bulky: every one after the cut steps, not just enough of them
            assert e.id in stepped
    # Room, not target: the plan buys room below the trigger at the fewest cached
    # tokens re-processed per token of it (docs/DESIGN.md "Room, not target").
    assert plan.new_tokens < s.window * plan.profile.trigger


def test_the_cheapest_cut_per_token_reclaimed_within_the_tolerance() -> None:
    # Enough lies after the mid-sized result alone (the requested cut), but going
    # back over the big one just before it reclaims far more for little more work.
    s = Session(window=20_000, checkpoints="every", cut_tolerance=5000, live_results=1)
    s.warm(
        [
            *opening(),
            replace(message(2, "user", 6000), pinned=True),
            call(3, "big"),
            result(4, "big", 3000, 3),
            call(5, "mid"),
            result(6, "mid", 6000, 5),
            message(7, "assistant", 20),
            call(8, "new"),
            result(9, "new", 100, 8),
            message(10, "assistant", 20),
        ]
    )
    old = s.layout
    assert old is not None
    plan, _ = s.turn([message(11, "user", 30)])
    assert plan.verdict is Verdict.RECLAIMED
    assert plan.requested_cut == start_of(old, 6)
    assert plan.chosen_cut == start_of(old, 4)
    assert {4, 6} <= {st.episode_id for st in plan.steps}


def test_a_far_checkpoint_is_used_and_reported_beyond_the_tolerance() -> None:
    s, _before = pressured(cut_tolerance=100)
    s.ends.clear()  # no checkpoint but the head
    plan, _ = s.turn([message(200, "user", 30)])
    assert plan.chosen_cut == 0
    assert "beyond the tolerance of 100" in plan.reason


def test_without_checkpoints_window_first_cuts_at_the_head_and_goes_deep() -> None:
    s, _ = pressured(checkpoints="none", profile=choose_profile("none"))
    plan, _ = s.turn([message(200, "user", 30)])
    assert plan.profile.name == "window-first"
    assert plan.pressure >= 0.70
    assert plan.chosen_cut == 0
    assert plan.reused == 0
    assert plan.new_tokens <= plan.target_tokens


def test_pinned_and_protected_episodes_never_step() -> None:
    s, _ = pressured(checkpoints="none", live_results=1)
    s.episodes = [replace(e, pinned=True) if e.id == 5 else e for e in s.episodes]
    plan, _ = s.turn([message(200, "user", 30), call(201, "z"), result(202, "z", 900, 201)])
    stepped = {st.episode_id for st in plan.steps}
    assert stepped
    assert not stepped & {0, 5, 200, 201, 202}


def test_a_result_the_assistant_has_not_answered_never_steps() -> None:
    s, _ = pressured(checkpoints="none", live_results=0)
    plan, _ = s.turn([message(200, "user", 30), call(201, "z"), result(202, "z", 3000, 201)])
    stepped = {st.episode_id for st in plan.steps}
    assert 89 in stepped  # with no live results, even the last answered one may step
    assert not stepped & {201, 202}


def test_a_prompt_that_fits_is_never_refused_though_nothing_can_step() -> None:
    s, _ = pressured()
    s.episodes = [replace(e, pinned=True) for e in s.episodes]
    plan, _ = s.turn([message(200, "user", 30)])
    assert plan.pressure >= 0.75
    assert plan.verdict is Verdict.STEPPING
    assert plan.steps == ()
    assert "nothing outside the protected tail can step; the prompt fits" in plan.reason


def test_refused_with_the_figures_when_the_prompt_cannot_fit_the_window() -> None:
    s, _ = pressured()
    s.episodes = [replace(e, pinned=True) for e in s.episodes]
    s.window = 8_000
    plan = s.plan()
    assert plan.verdict is Verdict.REFUSED
    assert plan.steps == ()
    assert f"the window holds {s.window:,}" in plan.reason
    assert f"needs {plan.prompt_tokens:,} tokens" in plan.reason


def test_a_single_message_most_of_the_window_is_served() -> None:
    # Issue 14: a user message at 77% of the window was refused ("nothing outside
    # the protected tail can step"), though the server alone serves it.
    s = Session(window=4_096)
    s.episodes = [message(0, "system", 30), message(1, "user", 3_150)]
    plan = s.plan()
    assert plan.pressure >= 0.75
    assert plan.verdict is Verdict.STEPPING


def test_refused_when_the_anchors_alone_exceed_the_budget() -> None:
    s = Session(window=10_000)
    s.anchors = [Anchor(1, "huge", 1, 6000)]
    s.episodes = opening()
    plan = s.plan()
    assert plan.verdict is Verdict.REFUSED
    assert plan.steps == ()
    assert "short by" in plan.reason


def test_a_call_and_its_results_leave_the_prompt_together() -> None:
    s = Session(window=100_000, checkpoints="none")
    old = [call(2, "a"), result(3, "a", 50, 2), result(4, "a", 50, 2)]
    s.warm(
        [
            *opening(),
            *(replace(e, tier=Tier.REFERENCED) for e in old),
            message(5, "assistant", 20),
            *rounds(6, 3, 10),
        ]
    )
    s.window = 500  # now everything must go
    plan, _ = s.turn([message(100, "user", 30)])
    moved = {st.episode_id: st.to_tier for st in plan.steps}
    assert moved[2] == moved[3] == moved[4] == Tier.ARCHIVED


def test_a_call_waits_for_its_result_to_reach_referenced() -> None:
    s = Session(window=100_000, checkpoints="none")
    s.warm(
        [
            *opening(),
            replace(call(2, "a"), tier=Tier.REFERENCED),
            replace(result(3, "a", 500, 2), tier=Tier.MASKED),
            message(5, "assistant", 20),
            *rounds(6, 3, 10),
        ]
    )
    s.window = 500
    plan, _ = s.turn([message(100, "user", 30)])
    assert plan.moves[3] is Tier.REFERENCED
    assert 2 not in plan.moves


def test_dropped_is_gated_and_the_only_refusal() -> None:
    s = Session(window=100_000)
    s.episodes = [
        *opening(),
        replace(message(2, "user", 5), tier=Tier.ARCHIVED, droppable=True),
        replace(message(3, "user", 5), tier=Tier.ARCHIVED, droppable=True),
        replace(message(4, "user", 5), tier=Tier.ARCHIVED),
        replace(message(5, "assistant", 5), depends_on=(3,)),
        message(6, "user", 5),
    ]
    plan = s.plan()
    assert [(st.episode_id, st.to_tier) for st in plan.steps] == [(2, Tier.DROPPED)]
    assert [(h.episode_id, h.reason) for h in plan.held] == [(3, "a Live episode depends on it")]


def test_a_rider_stays_where_it_was_first_sent_while_the_head_is_cached_then_joins() -> None:
    s, _ = pressured(checkpoints="every")
    s.window = 100_000
    s.anchors = [Anchor(1, "never push to main", 1, 6)]  # pinned now: the head is cached
    plan, prompt = s.turn([message(200, "user", 30)])
    assert plan.joined_anchors == ()
    assert plan.block_anchors == ()
    assert plan.reused > 0
    assert prompt.messages[-1]["content"].endswith("never push to main")
    at = len(prompt.messages) - 1
    first = len(s.sent)
    plan, prompt = s.turn([message(201, "assistant", 30)])
    # Kept in place, it is cached like any message: the new turn re-processes only
    # its own tokens (moved to the end every call, the rider was re-processed each time).
    assert plan.reused == first
    assert prompt.messages[at]["content"].endswith("never push to main")
    assert not prompt.messages[-1]["content"].endswith("never push to main")
    s.checkpoints = "none"  # the next change re-processes from the head
    plan, prompt = s.turn([message(202, "user", 30)])
    assert plan.joined_anchors == (1,)
    assert plan.block_anchors == (1,)
    assert "never push to main" in prompt.messages[0]["content"]
    assert all("never push" not in str(m["content"]) for m in prompt.messages[1:])
    s.checkpoints = "every"  # and it stays in the cached head from now on
    plan, prompt = s.turn([message(203, "assistant", 30)])
    assert (plan.block_anchors, plan.joined_anchors) == ((1,), ())
    assert plan.reused > 0


def test_a_result_the_model_is_about_to_read_does_not_pull_the_cut_back() -> None:
    # The pressure comes from the new result: with results folding as soon as they
    # are answered, it gives itself back on the next call for its stub. So this call
    # folds the answered result just before it — a late, cheap cut — instead of
    # re-processing everything from the head's end to reach target now (S8: ten
    # events cut there, docs/design/eviction.md).
    s = Session(window=12_000, live_results=0)
    s.warm([*opening(), *rounds(2, 20, 120), call(100, "a"), result(101, "a", 2500, 100)])
    old = s.layout
    assert old is not None
    plan, _ = s.turn([call(103, "b"), result(104, "b", 4000, 103)])
    assert plan.pressure >= 0.75
    assert plan.verdict is not Verdict.REFUSED
    # The last answered results fold (the big one, the last round's, and — for the
    # few tokens of the reply and call after it — the round's before), nothing older.
    assert start_of(old, 57) <= plan.chosen_cut <= start_of(old, 60)
    assert (
        {(60, Tier.MASKED), (101, Tier.MASKED)}
        <= set(changed(plan))
        <= {
            (57, Tier.MASKED),
            (60, Tier.MASKED),
            (101, Tier.MASKED),
        }
    )
    assert plan.new_tokens <= 12_000 * 0.75


def test_a_cut_is_priced_by_the_cached_tokens_it_re_processes_not_the_new_ones() -> None:
    # A long new message arrives; its tokens are processed whatever the cut, so
    # they must not make a deeper cut look cheaper per token it gives back.
    s = Session(window=40_000, checkpoints="every", cut_tolerance=8000, live_results=1)
    s.warm([*opening(), *rounds(2, 30, 600), call(200, "a"), result(201, "a", 3000, 200)])
    plan, _ = s.turn([message(202, "assistant", 20), message(203, "user", 9000)])
    assert plan.new_tokens < s.window * plan.profile.trigger
    assert plan.chosen_cut == plan.requested_cut


def test_the_prompt_size_is_known_before_the_server_sees_it() -> None:
    # The head's and a rider's estimates (nothing cached sizes them): planner
    # x_plan_turn__mutmut_77, _83 and xǁ_Plannerǁ_estimate__mutmut_1-4, _8, _14, _20-25.
    # The toy tokenizer counts a joined head a token apart from its parts.
    rule = "always answer in French " * 30
    s = Session(window=100_000)
    s.episodes = [message(0, "system", 50), message(1, "user", 30), message(2, "assistant", 40)]
    s.anchors = [Anchor(1, rule, 5, count(f"- [anchor 1] {rule}"))]
    plan = s.plan()
    s.apply(plan)
    assert abs(plan.prompt_tokens - len(s.sent)) <= 2
    s.anchors.append(Anchor(2, "never use tabs " * 20, 1, 80))  # pinned after: it rides
    plan, _ = s.turn([message(3, "user", 30)])
    assert plan.joined_anchors == ()
    assert abs(plan.new_tokens - len(s.sent)) <= 2


def test_an_archived_message_mid_session_leaves_the_rest_of_the_prompt_counted() -> None:
    # planner xǁ_Plannerǁmeasure__mutmut_27 (``continue`` → ``break``): the messages
    # after an archived one dropped out of the size.
    s = Session(window=100_000)
    s.episodes = [
        message(0, "system", 50),
        message(1, "user", 30, tier=Tier.ARCHIVED),
        message(2, "assistant", 40),
        message(3, "user", 30),
    ]
    plan = s.plan()
    s.apply(plan)
    assert abs(plan.prompt_tokens - len(s.sent)) <= 2


def test_an_edited_anchor_re_processes_from_the_head_and_the_rest_keeps_its_cached_size() -> None:
    # planner xǁ_Plannerǁmeasure__mutmut_50 (``m = 1``: the head never compared), _78 (a
    # cached span's size as end + start), _87/_88 (cached sizes ignored: episode 1's
    # declared size, 10, is not what the server saw, 44).
    s = Session(window=100_000)
    s.anchors = [Anchor(1, "rule one " * 10, 1, 30)]
    odd = Episode(1, "user", Kind.MESSAGE, text_of(40, 1), 10)
    s.warm([message(0, "system", 50), odd, message(2, "assistant", 40), message(3, "user", 30)])
    sent = len(s.sent)
    s.anchors = [Anchor(1, "rule two " * 10, 1, 30)]  # same id, same size, new text
    plan = s.plan()
    assert plan.reused == 0
    assert abs(plan.prompt_tokens - sent) <= 2


def test_a_turn_that_failed_does_not_pin_the_history() -> None:
    # Issue 31: OpenCode drops a failed answer and resends the rest, so the user
    # messages whose turns timed out pile up unanswered. They were all "the current
    # turn" and never stepped; the session refused every request from then on.
    s = Session(window=8_192)
    s.warm([*opening(), call(2, "a"), result(3, "a", 900, 2), message(4, "assistant", 20)])
    failed = [call(5, "b"), result(6, "b", 2_500, 5), message(7, "user", 2_000)]
    failed += [message(8, "user", 2_000)]
    plan, _ = s.turn([*failed, message(9, "user", 30)])
    assert plan.verdict is not Verdict.REFUSED, plan.reason
    stepped = {e for e, _ in changed(plan)}
    assert {6, 7, 8} <= stepped  # the failed turns' result and questions fold
    assert 9 not in stepped  # the turn being asked now is kept whole


def test_results_sent_with_a_single_reminder_stay_unanswered() -> None:
    # Claude Code sends tool results and a reminder in one user message: results, then
    # the reminder's user message. Those results are unread, not a failed turn.
    s = Session(window=8_192, live_results=0)
    s.warm([*opening(), call(2, "a"), result(3, "a", 900, 2), message(4, "assistant", 20)])
    plan, _ = s.turn([call(5, "b"), result(6, "b", 5_000, 5), message(7, "user", 30)])
    assert not {5, 6, 7} & {e for e, _ in changed(plan)}


def test_a_first_call_over_the_window_keeps_the_newest_material() -> None:
    # Issue 31: an 11k-token history sent to a new session (nothing cached) was cut
    # to 474 tokens, every file folded. With nothing cached every plan re-processes
    # the whole prompt: the oldest results fold first, only down to target.
    s = Session(window=8_192)
    s.episodes = [*opening(), *rounds(2, 5, 2_000), message(100, "user", 30)]
    plan = s.plan()
    assert plan.prompt_tokens > s.window
    assert plan.verdict is Verdict.RECLAIMED, plan.reason
    folded = {e for e, _ in changed(plan)}
    assert folded == {3, 6, 9}, folded  # the three oldest files; the two newest stay Live
    assert plan.new_tokens > plan.target_tokens // 2
    assert "the oldest material steps first" in plan.reason


def test_the_slices_of_one_user_message_are_not_a_failed_turn() -> None:
    # Issue 30 records a user message that mixes natures as slices, one episode each:
    # an attached file and the request after it are one message, not two turns.
    s = Session(window=8_192, live_results=0)
    s.warm([*opening(), call(2, "a"), result(3, "a", 900, 2), message(4, "assistant", 20)])
    attached = replace(message(7, "user", 30), joins=True)
    plan, _ = s.turn([call(5, "b"), result(6, "b", 5_000, 5), message(8, "user", 2_000), attached])
    assert not {5, 6, 7, 8} & {e for e, _ in changed(plan)}


def test_an_unseen_message_of_tool_calls_is_sized_as_it_is_sent() -> None:
    """A call costs its name's marker beyond its arguments: sized without it, an assistant
    message of n calls the server had not seen was planned n tokens short, and a plan that
    fit by less than that sent a prompt over the window (hypothesis found 2,539 of 2,538)."""
    s = Session(window=8192)
    s.episodes += [message(0, "system", 300), message(1, "user", 40)]
    s.episodes += [call(2, "c1"), call(3, "c2"), call(4, "c3")]
    s.episodes += [result(5 + k, f"c{k + 1}", 30, 2 + k) for k in range(3)]
    plan, _ = s.turn()
    assert plan.new_tokens == len(s.sent)
