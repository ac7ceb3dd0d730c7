"""The harnesses' registry (issue 38): one file a harness, found by listing the package.

A new harness is one new file: shown by writing one into a copy of the package and
asking every part that reads a harness (the screens' name, the session its headers
name, the natures, the churn repairs, the compaction rewrite, ``sakur4 wrap``'s table)
about it, with nothing else changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import sakur4
from sakur4.harnesses import KNOWN
from sakur4.harnesses.base import GENERIC

# The package as imported (its copy is what the new harness is added to).
SRC = Path(sakur4.__file__).resolve().parent.parent

ZED = '''"""Zed, a made-up harness for the registry's test."""

from sakur4.harnesses.base import ExtendsConversation, Harness, SessionIds, Wrap
from sakur4.vocabulary import Nature


def _launch(t, args, tmp):
    raise NotImplementedError


HARNESS = Harness(
    "zed",
    "Zed",
    order=50,
    agents=("zed",),
    openings=("You are Zed",),
    session=SessionIds("x-zed-session", "zed-"),
    sent=lambda system, messages: system.startswith("You are Zed"),
    slices=lambda m: [(str(m.get("content")), Nature.REQUEST)],
    file_messages=("Zed's files:",),
    repairs=("system-reminder",),
    compaction=ExtendsConversation("Zed, summarise"),
    wrap=Wrap("zed", "Zed", "zed", _launch, window_why="(docs/harnesses.md)"),
)
'''

ASK = """
import json
from sakur4.episodes.natures import classify, detect
from sakur4.gateway.anthropic import session_header
from sakur4.gateway.harnesses import harness_of
from sakur4.harnesses import FILE_MESSAGES, REPAIRS
from sakur4.harnesses.compaction import extends_cached
from sakur4.harnesses.recipes import HARNESSES

messages = [{"role": "system", "content": "You are Zed"}, {"role": "user", "content": "hi"}]
print(json.dumps({
    "agent": harness_of({"user-agent": "zed/0.9"}, {}),
    "prompt": harness_of({}, {"messages": messages}),
    "session": session_header({"x-zed-session": "s1"}),
    "detect": detect(messages),
    "natures": [p.nature.value for p in classify(messages, "zed")],
    "files": "Zed's files:" in FILE_MESSAGES,
    "repairs": list(REPAIRS),
    "compaction": extends_cached(
        {"tools": [{}], "messages": [{"role": "user", "content": "Zed, summarise"}]}
    ),
    "wrap": list(HARNESSES),
}))
"""


def test_a_new_harness_is_one_file(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC / "sakur4", copy / "sakur4", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "sakur4" / "harnesses" / "zed.py").write_text(ZED, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run(
        [sys.executable, "-c", ASK], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-800:]
    said = json.loads(done.stdout)
    assert said["agent"] == "Zed 0.9"
    assert said["prompt"] == "Zed"
    assert said["session"] == "zed-s1"
    assert said["detect"] == "zed"
    assert said["natures"] == ["instruction", "request"]
    assert said["files"] is True
    assert said["repairs"] == ["billing-header", "system-reminder"]
    assert said["compaction"]["harness"] == "zed"
    assert said["wrap"] == ["claude", "opencode", "aider", "codex", "zed"]


def test_each_harness_is_named_once_in_each_form() -> None:
    for form in (
        [h.name for h in KNOWN],
        [h.display for h in KNOWN],
        [a for h in KNOWN for a in h.agents],
        [h.wrap.name for h in KNOWN if h.wrap is not None],
        [h.order for h in KNOWN],
    ):
        assert len(form) == len(set(form)), form


def test_the_generic_harness_is_asked_last_and_claims_nothing() -> None:
    last = KNOWN[-1]
    assert last.name == GENERIC
    assert (last.agents, last.openings, last.sent, last.slices) == ((), (), None, None)
