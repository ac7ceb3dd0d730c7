"""Pasted and added files are attachments: content that may fold, not words (issue 41).

A fenced block of at least ``ATTACHMENT_TOKENS`` in the user's words (any harness), or
in aider's chat-files and read-only-files messages, is recorded as tool output; the
words around it stay as they were classified. Claude Code's ``@`` files and OpenCode's
file parts were tool output already (tests/episodes/test_natures.py).
"""

from __future__ import annotations

import pytest

from sakur4.episodes.natures import ATTACHMENT_TOKENS, Part, classify
from sakur4.vocabulary import Nature

FILE = "```python\n" + "def f(x):\n    return x + 1\n" * 200 + "```\n"  # ~1,350 tokens
SNIPPET = "```python\nx = compute(x)\n```\n"


def _split(text: str, harness: str = "generic") -> list[Part]:
    parts = classify([{"role": "user", "content": text}], harness)
    assert "".join(p.message["content"] for p in parts) == text  # the text, exactly
    return parts


def _natures(parts: list[Part]) -> list[Nature]:
    return [p.nature for p in parts]


@pytest.mark.parametrize(
    ("harness", "words"),
    [("generic", Nature.UNCLASSIFIED), ("opencode", Nature.REQUEST)],
)
def test_a_pasted_file_between_the_words_is_an_attachment(harness: str, words: Nature) -> None:
    parts = _split(f"Why does this drift?\n{FILE}It did not last week.", harness)
    assert _natures(parts) == [words, Nature.TOOL_OUTPUT, words]
    assert parts[1].message["content"] == FILE
    assert [p.part for p in parts] == [0, 1, 2]


def test_a_snippet_quoted_in_a_question_stays_with_the_words() -> None:
    parts = _split(f"Why does this fail?\n{SNIPPET}It did not last week.")
    assert _natures(parts) == [Nature.UNCLASSIFIED]


def test_a_block_just_under_the_size_stays_and_one_at_it_is_an_attachment() -> None:
    limit = ATTACHMENT_TOKENS * 4 - 3  # the shortest text estimated at the size
    for length, nature in [(limit - 1, Nature.UNCLASSIFIED), (limit, Nature.TOOL_OUTPUT)]:
        block = "```\n" + "y" * (length - 9) + "\n```\n"
        assert len(block) == length
        assert _split("see\n" + block)[-1].nature is nature


def test_an_unclosed_fence_is_not_an_attachment() -> None:
    parts = _split("Here it is:\n" + FILE.removesuffix("```\n"))
    assert _natures(parts) == [Nature.UNCLASSIFIED]


def test_a_file_in_claude_codes_words_splits_off_beside_its_reminders() -> None:
    reminder = "<system-reminder>\nThe date is today.\n</system-reminder>\n"
    parts = _split(f"{reminder}Look at this:\n{FILE}What is wrong?", "claude-code")
    assert _natures(parts) == [
        Nature.INSTRUCTION,
        Nature.REQUEST,
        Nature.TOOL_OUTPUT,
        Nature.REQUEST,
    ]


def test_aiders_added_files_are_attachments_and_its_words_stay_instructions() -> None:
    added = (
        "I have *added these files to the chat* so you can go ahead and edit them.\n\n"
        "*Trust this message as the true contents of these files!*\n\n"
        f"alpha.py\n{FILE}beta.py\n{SNIPPET}"
    )
    parts = _split(added, "aider")
    assert _natures(parts) == [Nature.INSTRUCTION, Nature.TOOL_OUTPUT, Nature.INSTRUCTION]
    assert parts[0].message["content"].endswith("alpha.py\n")  # the file's name stays
    assert "beta.py" in parts[2].message["content"]  # a small file stays


def test_other_instructions_keep_their_blocks() -> None:
    # The harness's instructions never fold, whatever they quote.
    repo_map = "Here are summaries of some files present in my git repository.\n" + FILE
    assert _natures(_split(repo_map, "aider")) == [Nature.INSTRUCTION]
