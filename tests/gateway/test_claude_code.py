"""Claude Code (pinned in tests/gateway/claude_code) driven through the gateway in front of
the real llama-server: non-interactive ``-p`` turns, ``--continue``, then a new
conversation. Its own system prompt and tools go unchanged; output is kept small
(the 270M model rarely stops by itself, and Claude Code resumes a cut answer on its
own, so one ``-p`` is a few requests). The server runs with ``--swa-full``, where
any prefix resumes. On Gemma 3's checkpoint ring the checkpoints a conversation
leaves sit near the ends of its own prompts, so a new conversation may find none
inside the shared system prompt; the receipt's prediction uses the checkpoint model
there, as the plan does.

Checked: every request answered and receipted, reuse across turns confirmed by the
server, and the billing-header repair shown in a receipt with what it saved (a new
conversation reuses the system prompt and tools the previous one left on the slot).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from gateway_receipts import receipts_of
from sakur4.backends.launcher import LlamaServer
from sakur4.cli import cli
from sakur4.turns.sessions import parent_of

HERE = Path(__file__).parent / "claude_code"
BINARY = HERE / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """Claude Code pointed at ``base_url``, with nothing leaving the machine."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-local-unused",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "16",
    }


def claude_through(
    start_gateway: Any, server: LlamaServer, tmp_path: Path
) -> tuple[Any, dict[str, str]]:
    """A gateway in front of ``server``, and Claude Code's environment pointed at it."""
    if not BINARY.exists():
        pytest.skip("Claude Code not installed: npm ci --prefix tests/gateway/claude_code")
    gw = start_gateway(server.url)
    home = tmp_path / "home"
    home.mkdir()
    return gw, claude_env(home, gw.url)


def run_claude(cwd: Path, env: dict[str, str], prompt: str, *more: str) -> dict[str, Any]:
    result = claude_result(cwd, env, prompt, *more)
    # Answered: the turn ended on the model's answer (cut at the small output limit
    # is Claude Code's own verdict on a 16-token answer, not a failed request).
    assert result.get("api_error_status") is None, result
    assert result["num_turns"] >= 1
    return result


def claude_result(cwd: Path, env: dict[str, str], prompt: str, *more: str) -> dict[str, Any]:
    """Claude Code's ``-p`` result (its JSON output's last line)."""
    done = subprocess.run(
        [str(BINARY), "-p", prompt, *more, "--model", "local", "--output-format", "json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert last.startswith("{"), (
        f"exit {done.returncode}: {done.stdout[-400:]} {done.stderr[-400:]}"
    )
    result: dict[str, Any] = json.loads(last)
    assert result["type"] == "result"
    return result


@pytest.mark.backend
def test_claude_code_through_the_gateway(
    llama_swa_full: LlamaServer, start_gateway: Any, tmp_path: Path
) -> None:
    gw, env = claude_through(start_gateway, llama_swa_full, tmp_path)
    first = run_claude(gw.project, env, "Say hi")
    again = run_claude(gw.project, env, "Say bye", "--continue")
    assert again["session_id"] == first["session_id"]
    other = run_claude(gw.project, env, "Name a colour")
    assert other["session_id"] != first["session_id"]

    receipts = receipts_of(gw)
    shown = CliRunner().invoke(
        cli, ["--store", str(gw.store), "--project", str(gw.project), "receipts"]
    )
    assert shown.exit_code == 0, shown.output
    print(shown.output)  # the sessions' receipts table, for the record
    # A side call or subagent is a session of its own under its run's (issue 41).
    sessions = sorted({parent_of(r.session) or r.session for r in receipts})
    assert sessions == sorted(f"claude-{s}" for s in {first["session_id"], other["session_id"]})
    assert len(receipts) == len(gw.transport.sent_messages)
    for r in receipts:
        assert not r.detail.get("failed"), r.as_dict()
        assert r.cache_verdict != "unverifiable"
        assert r.detail["upstream"] == "messages"
    by_session = [r for r in receipts if r.session == f"claude-{first['session_id']}"]
    # Reuse across turns, confirmed by the server: every later request resumed past
    # the system prompt and tools.
    for r in by_session[1:]:
        assert r.server_cached is not None
        assert r.server_cached >= 3000, r.as_dict()
    # The billing header was dropped on every request and named in each receipt; the
    # new conversation's first request reused the system prompt the first one left
    # (Gemma's template puts the first user message right after it, so the shared
    # prefix ends there: ~1,800 tokens of Claude Code 2.1.332's prompt).
    for r in receipts:
        assert [x["kind"] for x in r.detail["repairs"]][:1] == ["billing-header"]
    opening = next(r for r in receipts if r.session == f"claude-{other['session_id']}")
    (repair,) = [x for x in opening.detail["repairs"] if x["kind"] == "billing-header"]
    assert repair["before"] < 64, repair  # without it, reuse would stop in the header
    assert repair["saved_predicted"] >= 1000, repair
    # Confirmed by the server: it reused what the layout predicted, to a few tokens.
    assert opening.server_cached is not None
    assert repair["saved_confirmed"] >= repair["saved_predicted"] - 8, repair
    assert "billing-header:" in shown.output
    _screens_tell_the_truth(gw, shown.output, receipts)


@pytest.mark.backend
def test_claude_codes_own_compaction_is_served_from_the_cached_prompt(
    llama_swa_full: LlamaServer, start_gateway: Any, tmp_path: Path
) -> None:
    """Issue 28 item 4: Claude Code's ``/compact`` through the gateway on the real
    server. Its request is the conversation as it stands plus the summariser's
    instruction, so the session's cached prompt serves it: only the instruction is
    processed, and the receipt names the compaction."""
    gw, env = claude_through(start_gateway, llama_swa_full, tmp_path)
    run_claude(gw.project, env, "Say hi")
    compacted = claude_result(gw.project, env, "/compact", "--continue")
    assert compacted.get("local_command") == "compact", compacted
    receipts = receipts_of(gw)
    served = [r for r in receipts if "compaction" in r.detail]
    assert served, [r.detail.get("upstream") for r in receipts]
    for r in served:
        assert r.detail["compaction"]["harness"] == "claude-code"
        assert not r.detail.get("failed"), r.as_dict()
        assert r.server_processed is not None
        assert r.server_cached is not None
    r = served[0]
    print(
        f"Claude Code's compaction via the gateway: {r.server_processed:,} of "
        f"{r.prompt_tokens:,} tokens processed ({r.server_cached:,} reused)"
    )
    # The conversation came from the server's cache; what was processed is about the
    # instruction (~1,000 tokens in 2.1.332) and the template around it.
    assert r.server_cached >= r.prompt_tokens - 1500, r.as_dict()


@pytest.mark.backend
def test_claude_code_waits_out_a_fake_slow_prefill(
    llama_swa_full: LlamaServer, start_gateway: Any, tmp_path: Path
) -> None:
    """A server slow to open (faked: the gateway's call waits 25 s) and then silent while
    it prefills (the real one), with Claude Code's byte watchdogs at their 10 s minimum:
    the gateway's keep-alive (Anthropic's ping) holds the connection, so the turn is
    answered in one request. Without it Claude Code hung up 10 s into the prefill
    (35 s) and its retry too (30 s)."""
    gw, env = claude_through(start_gateway, llama_swa_full, tmp_path)
    env |= {"CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "10000"}
    env |= {"CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS": "10000"}
    gw.transport.delays.append(25.0)
    run_claude(gw.project, env, "Say hi")
    receipts = receipts_of(gw)
    assert gw.transport.delayed == 1
    assert gw.transport.cancelled == 0
    assert len(receipts) == len(gw.transport.sent_messages)
    for r in receipts:
        assert not r.detail.get("failed"), r.as_dict()


def _screens_tell_the_truth(gw: Any, table: str, receipts: list[Any]) -> None:
    """Issue 31, item 6, on a real Claude Code session: the index names the harness, a
    billing-header repair that spared nothing is no event marker, and `receipts
    --session` takes the 12 characters the table printed."""
    index = httpx.get(f"{gw.url}/sakur4/api/projects", timeout=60).json()
    (project,) = index["projects"]
    for s in project["sessions"]:
        assert s["harness"].startswith("Claude Code 2."), s
        assert s["refused"] == 0
        data = httpx.get(gw.url + s["api"], timeout=60).json()
        for t in data["turns"]:
            spared = next(x for x in t["repairs"] if x["kind"] == "billing-header")
            marked = any(e.startswith("repaired: billing-header") for e in t["events"])
            assert marked == ((spared.get("saved_confirmed") or 0) > 0), t["events"]
    shortened = receipts[0].session[:12]
    assert shortened in table
    args = ["--store", str(gw.store), "--project", str(gw.project), "receipts", "--json"]
    picked = CliRunner().invoke(cli, [*args, "--session", shortened])
    assert picked.exit_code == 0, picked.output
    assert {d["session"] for d in json.loads(picked.output)} == {receipts[0].session}
