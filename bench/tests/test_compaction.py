"""bench/compaction.py's sizing: the run measures a compaction only if OpenCode compacts
after its first answer, reads every file whole, and the gateway folds nothing first.
No real run here (that is the benchmark)."""

from __future__ import annotations

import compaction
from compaction import Sizing, project_files


def test_the_default_sizing_compacts_after_the_first_answer_and_fits_the_server() -> None:
    s = Sizing(16384, 4096, 13000)
    assert s.compacts_at == 12288  # OpenCode: window − limit.output (overflow.ts)
    assert s.problems() == []
    assert s.prompt > s.compacts_at
    assert s.prompt + s.output <= compaction.SERVER_CTX


def test_sizings_that_would_measure_nothing_are_refused_with_the_reason() -> None:
    assert "no compaction" in Sizing(16384, 4096, 12000).problems()[0]
    assert "fold" in Sizing(32768, 4096, 30000).problems()[0]
    assert "over the line again" in Sizing(6000, 4096, 13000).problems()[-1]


def test_the_files_add_up_to_the_prompt_and_opencode_reads_each_whole() -> None:
    s = Sizing(16384, 4096, 13000)
    files = project_files(s.defs)
    assert sum(text.count("def batch_") for text in files.values()) == s.defs
    # OpenCode's read tool keeps 2,000 lines and 50 KB of a file: so at the largest
    # prompt the server holds too.
    largest = Sizing(30000, 1024, 31000)
    assert largest.problems() == []
    for text in [*files.values(), *project_files(largest.defs).values()]:
        assert text.count("\n") < 2000
        assert len(text.encode()) < 50 * 1024
    estimate = compaction.OPENCODE_OVERHEAD + s.defs * compaction.TOKENS_PER_DEF
    assert abs(estimate - s.prompt) < compaction.TOKENS_PER_DEF


def test_answers_are_capped_on_the_way_never_raised() -> None:
    body = {"messages": [], "max_tokens": 4096, "stream": True}
    assert compaction.capped(body, 32) == {**body, "max_tokens": 32}
    assert compaction.capped({**body, "max_tokens": 8}, 32)["max_tokens"] == 8
    assert compaction.capped({"max_completion_tokens": 4096}, 32) == {
        "max_tokens": 32,
        "max_completion_tokens": 32,
    }
    assert body["max_tokens"] == 4096  # what OpenCode sent is kept as sent


def test_claude_codes_compaction_prompt_stays_under_the_gateway_s_trigger() -> None:
    # Past 0.75 of the server's window the planner folds the conversation first.
    assert compaction.claude_problems(22000) == []
    assert "trigger (24,576)" in compaction.claude_problems(23500)[0]
