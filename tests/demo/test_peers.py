"""The harnesses' own policies (sakur4.demo.peers), without a server: what they clear
and when, against the constants their sources publish."""

from __future__ import annotations

from typing import Any

from sakur4.demo.peers import (
    ANCHORED_TEMPLATE,
    CLEARED,
    PRUNE_MINIMUM,
    PRUNE_PROTECT,
    OpenCode,
    anchored_request,
    opencode_estimate,
    recent_start,
    transcript,
)

BIG = "word " * 16_000  # 24,685 tokens by OpenCode's estimate
MID = "word " * 10_500  # 16,200


def _turns(n: int, result: str, tool: str = "read_file") -> list[dict[str, Any]]:
    h: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for t in range(n):
        h.append({"role": "user", "content": f"turn {t}"})
        cid = f"c{t}"
        call = {"id": cid, "type": "function", "function": {"name": tool, "arguments": "{}"}}
        h.append({"role": "assistant", "content": None, "tool_calls": [call]})
        h.append({"role": "tool", "tool_call_id": cid, "content": result})
        h.append({"role": "assistant", "content": f"answer {t}"})
    return h


def test_opencode_estimates_as_its_token_module_does() -> None:
    # util/token.ts: letters 1/3.5, whitespace 1/2.5, digits 1/1.9, punctuation 1/1.2.
    assert opencode_estimate("abcdefg") == 1  # 1.999...: truncated, as in JS
    assert opencode_estimate("     ") == 2
    assert opencode_estimate("1234567890") == 5
    assert opencode_estimate("()()()") == 5
    assert opencode_estimate(BIG) == 24_685


def test_opencode_prunes_only_past_its_protected_40k_and_its_20k_minimum() -> None:
    assert (PRUNE_PROTECT, PRUNE_MINIMUM) == (40_000, 20_000)
    # Four old results of 24.7k each behind the last two turns: the newest is protected,
    # the second takes the total past 40k, so it and every older one is pruned.
    h = _turns(6, BIG)
    oc = OpenCode(64)
    marked = oc.prune(h)
    tools = [i for i, m in enumerate(h) if m.get("role") == "tool"]
    assert marked == 3
    assert oc.pruned == set(tools[:3])  # the last two turns' results are never looked at


def test_opencode_does_not_prune_below_its_minimum() -> None:
    # Three old results of 16.2k: only the oldest lies past 40k, and 16.2k is under 20k.
    oc = OpenCode(64)
    assert oc.prune(_turns(5, MID)) == 0
    assert oc.pruned == set()


def test_opencode_never_prunes_the_skill_tool() -> None:
    oc = OpenCode(64)
    assert oc.prune(_turns(8, BIG, tool="skill")) == 0


def test_a_pruned_result_is_sent_as_opencodes_placeholder() -> None:
    assert CLEARED == "[Old tool result content cleared]"


# ---------------------------------------------------------------------------
# OpenCode 1.18.33: the newest turns kept, the rest summarised from a transcript


def test_opencode_118_keeps_whole_turns_from_the_newest_back_while_they_fit() -> None:
    h = _turns(4, "x " * 400)  # each turn: ~330 estimated tokens (the result ~320)
    per = sum(opencode_estimate(str(m.get("content") or "")) for m in h[1:5])
    # Room for two whole turns and part of a third: the third is cut to the suffix that
    # fits (its answer alone), never before its first reply.
    start = recent_start(h, 1, 2 * per + 5)
    assert start == 1 + 4 + 3  # turn 1's answer: turns 2 and 3 whole before it
    assert recent_start(h, 1, 4 * per) == 1  # everything fits: nothing to summarise
    assert recent_start(h, 9, 0) == len(h)  # no room: nothing kept (the caller keeps the request)
    assert recent_start(h, 5, 10**6) == 5  # never before what was summarised


def test_opencode_118_writes_the_conversation_as_its_transcript() -> None:
    h = _turns(1, "y" * 2_500)
    text = transcript(h[1:])
    assert text.startswith("[User]: turn 0\n\n[Assistant tool call]: read_file({})")
    assert "[Tool result]: " + "y" * 2_000 + "\n[truncated]" in text
    assert text.endswith("[Assistant]: answer 0")
    first = anchored_request(text, None)
    assert first.startswith("Here is the conversation so far:\n\n<conversation>\n[User]")
    assert "Create a new anchored summary" in first
    assert "<prior-summary>" not in first
    again = anchored_request(text, "## Objective\n- old")
    assert "<prior-summary>\n## Objective\n- old\n</prior-summary>" in again
    assert again.endswith(ANCHORED_TEMPLATE.split("\n")[-1])
