"""Properties of plans and prompts over generated sessions (SPEC §7, issue 5).

Each example replays a generated session turn by turn through a gateway
stand-in (``sessions.Session``): plan, check, render, "send", remember the
layout. The toy tokenizer cuts real message bytes, so prefix identity is
checked on tokens, not on keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sakur4.engine import (
    Anchor,
    Episode,
    Kind,
    Plan,
    RenderedPrompt,
    Tier,
    Verdict,
    render_messages,
)
from sakur4.engine.folds import PREAMBLE, rendering, shown_text
from sakur4.engine.messages import shape_of
from sakur4.engine.profiles import BALANCED, CACHE_FIRST, WINDOW_FIRST
from sakur4.errors import AnchorBudgetError

from .sessions import Session, count, text_of

Message = dict[str, Any]
SIZES = st.sampled_from([1, 5, 20, 34, 80, 300, 1200, 4000])


@dataclass
class Script:
    turns: list[list[Episode]]
    anchors: list[tuple[int, Anchor]]
    session: Session


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    next_id = 0
    call_no = 0

    def ident() -> int:
        nonlocal next_id
        next_id += 1
        return next_id - 1

    def msg(role: str, history: bool) -> Episode:
        i = ident()
        size = draw(SIZES)
        return Episode(
            i,
            role,
            Kind.MESSAGE,
            text_of(size, i),
            size,
            tier=draw(st.sampled_from(list(Tier))) if history else Tier.LIVE,
            pinned=draw(st.integers(0, 9)) == 0,
            droppable=draw(st.booleans()),
        )

    def tool_round(history: bool) -> list[Episode]:
        nonlocal call_no
        n = draw(st.integers(1, 2))
        tier = draw(st.sampled_from(list(Tier))) if history else Tier.LIVE
        calls, results = [], []
        for _ in range(n):
            call_no += 1
            cid = f"call_{call_no}"
            ci = ident()
            args = json.dumps({"path": f"f{ci}.py"})
            calls.append(
                Episode(
                    ci,
                    "assistant",
                    Kind.TOOL_CALL,
                    args,
                    count(args),
                    tier=tier,
                    tool_name="read_file",
                    tool_call_id=cid,
                )
            )
        for c in calls:
            size = draw(SIZES)
            ri = ident()
            results.append(
                Episode(
                    ri,
                    "tool",
                    Kind.TOOL_RESULT,
                    text_of(size, ri),
                    size,
                    tier=tier,
                    tool_name="read_file",
                    tool_call_id=c.tool_call_id,
                    depends_on=(c.id,),
                    droppable=draw(st.booleans()),
                )
            )
        return calls + results

    turns: list[list[Episode]] = []
    n_turns = draw(st.integers(2, 6))
    for t in range(n_turns):
        history = t == 0
        chunk: list[Episode] = []
        if t == 0:
            chunk.append(replace(msg("system", False), pinned=False))
        if draw(st.booleans()) or t == 0:
            chunk.append(msg("user", False))
        for _ in range(draw(st.integers(0, 6 if history else 3))):
            if draw(st.booleans()):
                chunk += tool_round(history)
            else:
                chunk.append(msg("assistant", history))
        turns.append(chunk)

    # Anchors pinned at turn k > 0 arrive riding (the head is already cached).
    anchors = [
        (
            draw(st.integers(0, n_turns - 1)),
            Anchor(
                k,
                f"rule {k}",
                draw(st.integers(0, 3)),
                draw(st.sampled_from([2, 10, 40, 40, 40, 5000])),
            ),
        )
        for k in range(draw(st.integers(0, 3)))
    ]
    total = sum(e.tokens for chunk in turns for e in chunk) + 40 * sum(map(len, turns))
    window = max(400, int(total * draw(st.sampled_from([0.9, 1.1, 1.3, 1.6, 3.0]))))
    session = Session(
        window=window,
        profile=draw(st.sampled_from([CACHE_FIRST, WINDOW_FIRST, BALANCED])),
        checkpoints=draw(st.sampled_from(["every", "ring", "none"])),
        cut_tolerance=draw(st.sampled_from([0, 64, 1024, 4096])),
        live_results=draw(st.integers(0, 2)),
        ring_extra=draw(st.lists(st.integers(0, 50), max_size=4)),
    )
    return Script(turns, anchors, session)


def protected(episodes: list[Episode], live_results: int) -> set[int]:
    """SPEC's protected set, restated independently of the planner: pinned, the
    leading system prompt, the latest user message, what the assistant has not
    answered yet (unless a later user message followed it: a failed turn), and the
    newest ``live_results`` answered results with their calls."""
    keep = {e.id for e in episodes if e.pinned}
    lead = 0
    while (
        lead < len(episodes)
        and episodes[lead].kind == Kind.MESSAGE
        and (episodes[lead].role == "system")
    ):
        keep.add(episodes[lead].id)
        lead += 1
    users = [k for k, e in enumerate(episodes) if e.kind == Kind.MESSAGE and e.role == "user"]
    if users:
        keep.add(episodes[users[-1]].id)
    answered = [
        k
        for k, e in enumerate(episodes)
        if e.kind == Kind.TOOL_CALL or (e.kind == Kind.MESSAGE and e.role == "assistant")
    ]
    last = answered[-1] if answered else -1
    tail_users = [k for k in users if k > last]
    # Two user messages with no answer between: the earlier one's turn failed.
    current = users[-1] if len(tail_users) > 1 else last + 1
    keep |= {e.id for e in episodes[current:]}
    results = [e for e in episodes[: last + 1] if e.kind == Kind.TOOL_RESULT]
    keep |= {e.id for e in results[len(results) - live_results :]} if live_results else set()
    calls = {e.tool_call_id: e.id for e in episodes if e.kind == Kind.TOOL_CALL}
    keep |= {
        calls[e.tool_call_id]
        for e in episodes
        if e.kind == Kind.TOOL_RESULT and e.id in keep and e.tool_call_id in calls
    }
    return keep


def a_fold_exists(episodes: list[Episode], keep: set[int]) -> bool:
    """Is there a Live tool result outside ``keep`` whose stub is shorter than it?"""
    return any(
        e.kind == Kind.TOOL_RESULT
        and e.tier is Tier.LIVE
        and e.id not in keep
        and not e.pinned
        and len(shown_text(e, Tier.MASKED)) < len(e.content)
        for e in episodes
    )


def check_pairing(prompt: RenderedPrompt, episodes: list[Episode]) -> None:
    called: list[str] = []
    answered: set[str] = set()
    for m in prompt.messages:
        if m["role"] == "assistant":
            called += [c["id"] for c in m.get("tool_calls", [])]
        if m["role"] == "tool":
            assert m["tool_call_id"] in called, "a result appeared without its call"
            answered.add(m["tool_call_id"])
    has_result = {e.tool_call_id for e in episodes if e.kind == Kind.TOOL_RESULT}
    for cid in called:
        assert cid not in has_result or cid in answered, "a call lost its result"


def check_plan(plan: Plan, s: Session, before: dict[int, Tier], anchors_over: bool) -> None:
    moved = [step.episode_id for step in plan.steps]
    assert len(moved) == len(set(moved))
    for step in plan.steps:
        assert step.from_tier == before[step.episode_id]
        assert step.to_tier == step.from_tier + 1  # one rung, never more
        assert step.reclaimed >= 0
    assert plan.reused <= (s.layout.end if s.layout else 0)
    if plan.chosen_cut is not None:
        assert plan.reused <= plan.chosen_cut
    assert plan.reprefill == max(0, plan.new_tokens - plan.reused)

    pressured = plan.pressure >= plan.profile.trigger
    # Below the trigger the newest answered results are kept; at it, any may fold.
    keep = protected(s.episodes, 0 if pressured else s.live_results)
    if "unread attachment(s) folded" in plan.reason:
        # Unread user content that is not pinned (an attachment: the user's words are
        # pinned) folds only in a turn that cannot fit the window with it (issue 41).
        assert plan.prompt_tokens > s.window, plan.reason
        keep -= {
            e.id
            for e in s.episodes
            if e.id in keep and e.kind == Kind.MESSAGE and e.role == "user" and not e.pinned
        }
    assert not set(moved) & keep, "a pinned or protected episode stepped"
    for step in plan.steps:  # a rendering is never longer than what it replaces
        assert step.tokens_after <= step.tokens_before

    if anchors_over:
        assert plan.verdict is Verdict.REFUSED
        assert plan.steps == ()
        return
    if plan.verdict is Verdict.REFUSED:
        assert plan.steps == ()
        # A prompt that fits the window is never refused (the estimates are exact here).
        assert plan.prompt_tokens > s.window, plan.reason
    elif pressured and a_fold_exists(s.episodes, keep):
        assert any(step.to_tier <= Tier.ARCHIVED for step in plan.steps)
    if not pressured:
        assert plan.verdict is Verdict.FITS


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scripts())
def test_plans_and_prompts_keep_their_promises(script: Script) -> None:
    s = script.session
    for turn, chunk in enumerate(script.turns):
        s.episodes.extend(chunk)
        s.anchors += [a for k, a in script.anchors if k == turn]
        sent_before = list(s.sent)
        tiers_before = s.tiers()
        plan = s.plan()
        budget = int(s.window * plan.profile.target) - count(PREAMBLE)
        anchors_over = sum(a.tokens for a in s.anchors) > budget
        check_plan(plan, s, tiers_before, anchors_over)
        event(f"verdict {plan.verdict}" + (" (anchors)" if anchors_over else ""))
        if any(a.id not in plan.block_anchors for a in s.anchors):
            event("riding anchors kept riding")
        if plan.joined_anchors:
            event("riding anchors joined")
        if plan.chosen_cut is not None:
            event("cut " + ("at the head" if plan.chosen_cut == 0 else "inside the cache"))
        if plan.verdict is Verdict.REFUSED:
            if anchors_over:
                with pytest.raises(AnchorBudgetError):
                    s.apply(plan)
            return  # the gateway answers with the error; nothing is sent

        anchors = list(s.anchors)
        prompt = s.apply(plan)
        # The prompt sent never exceeds the window.
        assert len(s.sent) <= s.window, (len(s.sent), s.window, plan.reason)
        # The new prompt's tokens up to the cut are the cached prompt's tokens.
        if plan.chosen_cut is not None:
            assert s.sent[: plan.chosen_cut] == sent_before[: plan.chosen_cut]
        assert s.sent[: plan.reused] == sent_before[: plan.reused]
        check_pairing(prompt, s.episodes)
        text = "\n".join(str(m["content"]) for m in prompt.messages)
        for a in anchors:  # pinned anchors are never dropped
            assert f"- [anchor {a.id}] {a.text}" in text
        # Rendering is a pure function: the same state gives the same bytes.
        assert render_messages(s.episodes, s.anchors, plan) == render_messages(
            list(s.episodes), list(s.anchors), plan
        )
        after = s.tiers()
        for eid, tier in after.items():
            assert tier - tiers_before.get(eid, tier) in (0, 1)


def _removes_only(plan: Plan, episodes: list[Episode]) -> bool:
    """Whether every step of ``plan`` that changes bytes removes a whole message (a
    plan a KV-shifting server serves by shifting what stays), and at least one does.
    (Archiving an assistant's text that shares its message with a call rewrites
    that message: a replacement.)"""
    shape = shape_of(episodes)
    index = {e.id: i for i, e in enumerate(episodes)}
    after = [plan.tier_of(e) for e in episodes]
    removes = False
    for step in plan.steps:
        i = index[step.episode_id]
        e = episodes[i]
        if rendering(e, step.to_tier) is rendering(e, step.from_tier):
            continue  # the same bytes
        if step.to_tier < Tier.ARCHIVED:
            return False  # a replacement: a line where the text was
        if i not in shape.head and any(
            after[j] < Tier.ARCHIVED for j in shape.members(shape.group_of[i]) if j != i
        ):
            return False  # its message stays, rewritten
        removes = True
    return removes


def _subsequence(kept: list[Message], before: list[Message]) -> bool:
    it = iter(before)
    return all(any(m == b for b in it) for m in kept)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scripts())
def test_a_removal_plan_keeps_every_other_message_byte_identical(script: Script) -> None:
    # On a KV-shifting server (--cache-reuse) a removal is nearly free only if what
    # stays is byte-identical: the server shifts cached runs that match exactly.
    s = script.session
    before: list[Message] = []
    for turn, chunk in enumerate(script.turns):
        s.episodes.extend(chunk)
        s.anchors += [a for k, a in script.anchors if k == turn]
        episodes = list(s.episodes)
        plan = s.plan()
        if plan.verdict is Verdict.REFUSED:
            return
        try:
            # What the plan does to the messages sent before (this turn's are new).
            old = list(
                render_messages(episodes[: len(episodes) - len(chunk)], s.anchors, plan).messages
            )
            sent = list(s.apply(plan).messages)
        except AnchorBudgetError:
            return
        if before and _removes_only(plan, episodes) and not plan.joined_anchors:
            event("removal plan")
            while old and old[-1] not in before:
                old.pop()  # a rider pinned this turn
            assert _subsequence(old, before), plan.reason
        before = sent
