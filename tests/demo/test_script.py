"""The benchmark's scripted session and its agent, without a server.

The generator must give the same session for the same seed (tables name a script
by its parameters), and the agent must charge for hiding exactly when the prompt
the server received lacks a needed result: a re-read then, none otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sakur4.demo.agent import ScriptedAgent, drive
from sakur4.demo.direct import ObservationMask
from sakur4.demo.scenario import Request, Session, assistant_call, tool_result
from sakur4.demo.script import PRESETS, generate, preset
from sakur4.demo.via_gateway import fold_refetch
from sakur4.episodes.stream import record_episodes
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

SMALL = replace(PRESETS["S8"], turns=12, need_share=0.5)


def _fingerprint(s: Session) -> list[Any]:
    return [s.system, s.tools] + [
        (t.user, t.answer, [(x.name, x.arguments, x.result) for x in t.steps], t.need)
        for t in s.turns
    ]


def test_the_generator_is_deterministic_per_seed() -> None:
    assert _fingerprint(generate(SMALL)) == _fingerprint(generate(SMALL))
    other = generate(replace(SMALL, seed=SMALL.seed + 1))
    assert _fingerprint(other) != _fingerprint(generate(SMALL))
    assert SMALL.key == replace(SMALL).key != replace(SMALL, seed=8).key


def test_a_generated_session_has_the_stated_shape() -> None:
    s = generate(SMALL)
    assert len(s.turns) == SMALL.turns
    assert s.turns[1].pin is not None
    assert all(t.pin is None for t in s.turns if t.index != 1)
    assert all(1 <= len(t.steps) <= 3 for t in s.turns)
    answers = [t.answer for t in s.turns]
    assert len(set(answers)) == len(answers)  # every answer distinct
    needs = [t.need for t in s.turns if t.need is not None]
    assert needs
    for n in needs:
        assert 1 <= n.turn - n.source_turn <= 8
        source = s.turns[n.source_turn]
        assert any(x.call_id == n.call_id and x.result == n.content for x in source.steps)
    assert '"name": "read_file"' in s.system  # the schemas are part of the head


def test_unknown_preset_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown size 'S64'"):
        preset("S64")


def _replay(session: Session, hide: set[str]) -> tuple[ScriptedAgent, list[Request]]:
    """Drive the agent; the 'server' receives every message except results in ``hide``."""
    agent = ScriptedAgent(session)
    calls: list[Request] = []

    async def send(i: int, req: Request) -> Sequence[Mapping[str, Any]]:
        calls.append(req)
        return [m for m in req.messages if str(m.get("content")) not in hide]

    asyncio.run(drive(agent, send))
    return agent, calls


def test_a_need_turn_re_reads_only_when_the_sent_prompt_lacks_the_result() -> None:
    s = generate(SMALL)
    need = next(t.need for t in s.turns if t.need is not None)
    agent, calls = _replay(s, hide=set())
    assert agent.rereads == []  # everything was sent: nothing to fetch again
    assert not any(c.reread for c in calls)

    agent, calls = _replay(s, hide={need.content})
    assert need in agent.rereads
    again = next(c for c in calls if c.reread and c.turn == need.turn)
    assert again.reread == "read_file"
    assert again.messages[-1] == {
        "role": "tool",
        "tool_call_id": f"reread_{need.turn}",
        "content": need.content,
    }
    # The re-read is the call right after the need turn's first call.
    i = calls.index(again)
    assert calls[i - 1].turn == need.turn
    assert calls[i - 1].step == 0


def test_live_turns_count_until_a_result_leaves_the_prompt() -> None:
    s = generate(replace(SMALL, need_share=0.0))
    agent, _ = _replay(s, hide=set())
    assert agent.live_turns() == [
        SMALL.turns - t.index for t in s.turns for _ in t.steps
    ]  # never hidden: each stays to the end
    first = s.turns[0].steps[0].result
    agent, _ = _replay(s, hide={first})
    assert agent.live_turns()[0] == 0  # hidden from the call after it arrived


def test_through_sakur4_a_shown_stub_is_opened_and_a_missing_one_read_again(
    tmp_path: Path,
) -> None:
    s = generate(SMALL)
    need = next(t.need for t in s.turns if t.need is not None)
    store = open_store(tmp_path / "sakur4.db")
    try:
        project = ensure_project(store, tmp_path)
        step = next(x for t in s.turns for x in t.steps if x.call_id == need.call_id)
        ids = record_episodes(
            store, project.id, "bench", need.source_turn, [assistant_call(step), tool_result(step)]
        )
        refetch = fold_refetch(store, project.id)
        stub = [{"role": "tool", "content": f"[folded result]\nopen with open_fold({ids[1]})"}]
        other = [{"role": "tool", "content": f"open with open_fold({ids[0]})"}]  # not the result
        opened = refetch(need, stub)
        assert (opened.name, opened.arguments, opened.result) == (
            "open_fold",
            {"id": ids[1]},
            need.content,
        )
        assert refetch(need, other).name == "read_file"
        assert refetch(need, []).name == "read_file"
    finally:
        store.close()


def _history(turns: int, results: int) -> list[dict[str, Any]]:
    h: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for t in range(turns):
        h.append({"role": "user", "content": f"turn {t}"})
        for k in range(results):
            h.append({"role": "assistant", "content": None, "tool_calls": []})
            h.append({"role": "tool", "content": f"result {t}.{k}\nline 2"})
        h.append({"role": "assistant", "content": f"answer {t}"})
    return h


def _shown_results(manager: ObservationMask, history: list[dict[str, Any]]) -> list[str]:
    shown, _ = manager.view(history)
    return [str(m["content"]) for m in shown if str(m["content"]).startswith("result")]


def test_rolling_masking_with_lag_1_shows_only_the_newest_result() -> None:
    h = _history(3, 2)
    assert _shown_results(ObservationMask("mask-lag1", lag=1), h) == ["result 2.1\nline 2"]
    shown, event = ObservationMask("mask-lag1", lag=1).view(h)
    assert event == "masked 5 results"
    assert shown[3]["content"] == "Old tool output: (2 lines omitted)"


def test_a_10_turn_window_masks_the_results_of_older_turns() -> None:
    h = _history(12, 1)
    shown = _shown_results(ObservationMask("mask-10turns", turns=10), h)
    assert shown == [f"result {t}.0\nline 2" for t in range(2, 12)]


def test_the_claude_code_shape_attaches_files_inside_the_users_messages() -> None:
    """S8cc (issue 30): the session as Claude Code sends it — its opening line, its
    environment after the first request, each file read attached inside the user's
    message — which the gateway reads as requests, instructions and tool output."""
    from sakur4.episodes.natures import classify, detect
    from sakur4.vocabulary import Nature

    params = replace(PRESETS["S8cc"], turns=6)
    assert replace(params, name="S8", turns=30).key != PRESETS["S8"].key  # its own cache
    s = generate(params)
    assert _fingerprint(s)[2:] == _fingerprint(generate(replace(params, shape="tools")))[2:]
    agent, calls = _replay(s, hide=set())
    last = calls[-1].messages
    assert [m["role"] for m in last[:3]] == ["system", "user", "system"]
    assert last[2]["content"].startswith("# Environment")
    called = [c["function"]["name"] for m in last for c in m.get("tool_calls") or []]
    assert "read_file" not in called  # files come attached, never as calls
    reads = [x for t in s.turns for x in t.steps if x.name == "read_file"]
    assert len(agent.live_turns()) == sum(len(t.steps) for t in s.turns)
    assert detect(last) == "claude-code"
    parts = classify(last, "claude-code")
    for t in s.turns:
        words = t.user if not t.pin else f"{t.pin}\n\n{t.user}"
        assert {p.nature for p in parts if words in str(p.message["content"])} == {Nature.REQUEST}
    for r in reads:
        holding = [p for p in parts if r.result in str(p.message["content"])]
        assert [(p.message["role"], p.nature) for p in holding] == [("user", Nature.TOOL_OUTPUT)]
