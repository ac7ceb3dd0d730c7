"""bench/harness_sessions.py's pure parts: the script every harness is given, the
scratch repository, and how the proxy's records are judged (a turn answered, a session
stuck, the instructions and the turn-1 rule present, reuse by the server's counts). No
real run here (that is the benchmark)."""

from __future__ import annotations

import json
from pathlib import Path

import harness_sessions as hs
from harness_sessions import RULE, TURNS, Exchange, judge, read_records, timings


def test_twelve_tagged_turns_read_files_and_attach_one_oversized_file() -> None:
    assert len(TURNS) == 12
    assert [hs.TAG.findall(t.text) for t in TURNS] == [[str(n)] for n in range(1, 13)]
    assert RULE in TURNS[0].text
    assert sum(t.big for t in TURNS) == 1
    assert sum(bool(t.reads) and not t.big for t in TURNS) >= 5


def test_each_harness_gets_the_files_its_own_way() -> None:
    big = next(n for n, t in enumerate(TURNS, 1) if t.big)
    claude = hs.harness_argv("claude", big, TURNS[big - 1])
    assert f"@{hs.BIG}" in claude[1]
    assert "--continue" in claude
    assert "--continue" not in hs.harness_argv("claude", 1, TURNS[0])
    opencode = hs.harness_argv("opencode", big, TURNS[big - 1])
    assert opencode[:4] == ["run", "-c", "-f", hs.BIG]
    assert opencode[-1] == TURNS[big - 1].text
    lines = hs.aider_lines(TURNS)
    assert f"/add {hs.BIG}" in lines
    assert "/read-only README.md" in lines
    assert [ln for ln in lines if not ln.startswith("/")] == [t.text for t in TURNS]


def test_the_scratch_repository_has_twenty_files_and_one_that_cannot_fit(tmp_path: Path) -> None:
    hs.make_repo(tmp_path)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and ".git" not in p.parts]
    assert 18 <= len(files) <= 24
    for t in TURNS:
        for path in t.reads:
            assert (tmp_path / path).is_file()
    # Over 8,192 tokens (digits are a token each in Gemma's vocabulary), under 50 KB.
    assert 3 * 8192 < len((tmp_path / hs.BIG).read_text()) < 50_000


def _chat(system: str, *user: str, answered: bool = True, cache: int = 90) -> Exchange:
    msgs = [{"role": "system", "content": system}]
    msgs += [{"role": "user", "content": [{"type": "text", "text": u}]} for u in user]
    timed = json.dumps({"timings": {"prompt_n": 10, "cache_n": cache}})
    done = f'data: {{"choices":[]}}\n\ndata: {timed}\n\n'
    return Exchange("/v1/chat/completions", json.dumps({"messages": msgs}),
                    200 if answered else 500, done.encode() if answered else b"")  # fmt: skip


SYSTEM = "You are a coding agent; follow the user's rules to the letter.\n\nUse the tools given."


def test_a_session_judged_from_the_servers_records() -> None:
    t1 = f"{RULE} (turn 1) hi"
    records = [
        _chat("Generate a title for this conversation.", t1, cache=0),  # a side request
        _chat("", "Say one word.", cache=0),  # the gateway's probe
        _chat(SYSTEM, t1),
        *(_chat(SYSTEM, t1, f"(turn {n}) q") for n in range(2, 6)),
        _chat(SYSTEM, t1, "(turn 6) big", answered=False),
        _chat("Context management (Sakur4): …\n\n" + SYSTEM, t1, "(turn 7) q"),
        _chat("folded #12", t1, "(turn 8) q"),  # the instructions lost
        _chat(SYSTEM, "(turn 9) q"),  # the rule lost
        *(_chat(SYSTEM, t1, f"(turn {n}) q") for n in range(10, 13)),
    ]
    result = judge("x", read_records(records), {10: "API Error"})
    assert result.answered == [1, 2, 3, 4, 5, 7, 8, 9, 11, 12]
    assert result.stuck == [10]
    assert (result.requests, result.side, result.main) == (14, 2, 12)
    assert (result.instructions, result.rule) == (11, 11)
    assert result.missing == [SYSTEM.split("\n\n")[0]]
    # Reuse by the server's counts, over every request it answered.
    assert (result.processed, result.reused) == (130, 990)
    assert "10 / 12" in hs.table([result])
    assert "yes (1: [10])" in hs.table([result])


def test_timings_from_a_json_answer_or_the_last_event_of_a_stream() -> None:
    assert timings(b'{"timings": {"prompt_n": 5, "cache_n": 7}}') == (5, 7)
    stream = b'data: {"a":1}\n\ndata: {"timings":{"prompt_n":3,"cache_n":4}}\n\ndata: [DONE]\n'
    assert timings(stream) == (3, 4)
    assert timings(b"data: [DONE]\n") is None


def test_the_messages_api_s_system_blocks_and_usage_are_read() -> None:
    body = {
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "(turn 3) hi"}]},
            {"role": "user", "content": [{"type": "tool_result", "content": "(turn 4) x"}]},
        ],
    }
    assert hs.message_texts(body)[0] == ("system", "You are Claude Code.")
    assert hs.turn_of(body) == 4
    start = {"type": "message_start", "message": {"usage": {"cache_read_input_tokens": 42,
                                                            "input_tokens": 1}}}  # fmt: skip
    stream = f"event: message_start\ndata: {json.dumps(start)}\n\ndata: {{}}\n"
    assert timings(stream.encode()) == (1, 42)
    assert timings(b'{"usage": {"input_tokens": 5, "cache_read_input_tokens": 0}}') == (5, 0)


def test_aider_can_be_given_the_read_files_with_add() -> None:
    lines = hs.aider_lines(TURNS, "/add")
    assert "/add README.md" in lines
    assert not [ln for ln in lines if ln.startswith("/read-only")]
