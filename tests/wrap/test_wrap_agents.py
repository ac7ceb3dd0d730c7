"""``sakur4 wrap --agents N`` as a user runs it, in front of the real llama-server: the
several-agent advice from the probe the gateway measured and stored, and, for one
agent, that subagents count (issue 37 item 5)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sakur4.backends.agents_advice import SLOT_DIR
from sakur4.backends.launcher import LlamaServer, free_port
from sakur4.wrap.agents import SUBAGENTS_COUNT
from wrapped import run_wrap, wrap_env


@pytest.mark.backend
def test_wrap_advises_for_the_agents_it_is_told(
    llama_swa_full: LlamaServer, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    project = tmp_path / "project"
    project.mkdir()
    command = ("--openai", "--", sys.executable, "-c", "print('ran')")
    url = ("--backend", llama_swa_full.url)
    four = run_wrap(project, env, *url, "--port", str(free_port()), "--agents", "4", *command)
    assert four.returncode == 0, four.stderr[-2000:]
    assert "ran" in four.stdout
    # The gateway measured the server and stored it; wrap advised from that.
    assert "sakur4 wrap: for 4 agents (every subagent and every terminal" in four.stderr
    assert f"`-np 4 -c 32768 --slot-save-path {SLOT_DIR} -cram 0`" in four.stderr
    assert f"--slot-save-path {SLOT_DIR}" in four.stderr
    assert SUBAGENTS_COUNT not in four.stderr
    one = run_wrap(project, env, *url, "--port", str(free_port()), *command)
    assert one.returncode == 0, one.stderr[-2000:]
    assert f"sakur4 wrap: {SUBAGENTS_COUNT}" in one.stderr
    assert "-np " not in one.stderr
