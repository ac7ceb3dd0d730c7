"""``sakur4 wrap HARNESS --save``: without it the user's own configuration files are
byte-for-byte untouched; with it the configuration is merged into them (the user's
other keys kept), and the real harness, started by itself afterwards, reads it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sakur4.backends.launcher import LlamaServer
from sakur4.demo.via_gateway import running_gateway
from sakur4.errors import SettingsError
from sakur4.harnesses.save import Edit, merged, save
from sakur4.settings import Settings
from wrapped import CLAUDE_DIR, OPENCODE_DIR, run_wrap, wrap_env

USER_OPENCODE = {
    "$schema": "https://opencode.ai/config.json",  # OpenCode adds it to a file without it
    "theme": "tokyonight",
    "provider": {"mine": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": "x"}}},
    "mcp": {"other": {"type": "local", "command": ["true"], "enabled": False}},
}
USER_CLAUDE_SETTINGS = {"env": {"MY_VAR": "1"}, "permissions": {"allow": ["Bash(ls)"]}}
USER_CLAUDE_STATE = {"numStartups": 3, "mcpServers": {"other": {"command": "true", "args": []}}}


def _write(path: Path, data: object) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path.read_bytes()


def _installed(where: Path, name: str) -> None:
    if not where.is_dir():
        pytest.skip(f"{name} not installed (scripts/setup-tests)")


def _run(binary: Path, args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(binary), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-1500:]
    return done.stdout + done.stderr


@pytest.mark.backend
def test_save_writes_the_harness_files_and_only_with_save(
    llama_swa_full: LlamaServer, tmp_path: Path
) -> None:
    _installed(OPENCODE_DIR, "OpenCode")
    _installed(CLAUDE_DIR, "Claude Code")
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    env = wrap_env(home, tmp_path / "store.db", OPENCODE_DIR, CLAUDE_DIR)
    opencode_json = home / ".config" / "opencode" / "opencode.json"
    claude_settings = home / ".claude" / "settings.json"
    claude_state = home / ".claude" / ".claude.json"  # CLAUDE_CONFIG_DIR is ~/.claude here
    before = {
        opencode_json: _write(opencode_json, USER_OPENCODE),
        claude_settings: _write(claude_settings, USER_CLAUDE_SETTINGS),
    }
    _write(claude_state, USER_CLAUDE_STATE)
    settings = Settings.load(
        store=tmp_path / "store.db", project=project, backend=llama_swa_full.url
    )
    with running_gateway(settings) as gateway:
        port = gateway.url.rsplit(":", 1)[1]
        for name in ("opencode", "claude"):
            done = run_wrap(project, env, "--port", port, name, "--", "mcp", "list")
            assert done.returncode == 0, done.stderr[-1500:]
            assert "saved" not in done.stderr
        # Without --save: every byte as the user left it. Claude Code keeps its own
        # state in .claude.json (start-ups, an id): there only the MCP servers are ours.
        assert {p: p.read_bytes() for p in before} == before
        state = json.loads(claude_state.read_text())
        assert state["mcpServers"] == USER_CLAUDE_STATE["mcpServers"]

        for name in ("opencode", "claude"):
            done = run_wrap(project, env, "--port", port, name, "--save", "--", "mcp", "list")
            assert done.returncode == 0, done.stderr[-1500:]
            assert "saved the configuration in" in done.stderr

    saved = json.loads(opencode_json.read_text())
    assert saved["theme"] == "tokyonight"
    assert set(saved["provider"]) == {"mine", "sakur4"}
    assert set(saved["mcp"]) == {"other", "sakur4"}
    provider = saved["provider"]["sakur4"]
    assert provider["options"]["baseURL"] == f"{gateway.url}/v1"
    assert "headers" not in provider["options"]  # no project: it serves any project
    assert "--project" not in saved["mcp"]["sakur4"]["command"]
    cc = json.loads(claude_settings.read_text())
    assert cc["permissions"] == USER_CLAUDE_SETTINGS["permissions"]
    assert cc["env"]["MY_VAR"] == "1"
    assert cc["env"]["ANTHROPIC_BASE_URL"] == gateway.url
    assert "ANTHROPIC_CUSTOM_HEADERS" not in cc["env"]
    state = json.loads(claude_state.read_text())
    assert state["numStartups"] == 3
    assert set(state["mcpServers"]) == {"other", "sakur4"}

    # The real harnesses, started by themselves, read what was saved.
    resolved = json.loads(_run(OPENCODE_DIR / "opencode", ["debug", "config"], project, env))
    assert resolved["model"] == resolved["small_model"]
    assert resolved["model"].startswith("sakur4/")
    assert resolved["mcp"]["sakur4"]["enabled"] is True
    listed = _run(CLAUDE_DIR / "claude", ["mcp", "list"], project, env)
    assert "sakur4" in listed


def test_a_file_that_is_not_plain_json_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    good = tmp_path / "a.json"
    bad = tmp_path / "b.jsonc"
    bad.write_text('{ // a comment\n "x": 1 }')
    text = bad.read_bytes()
    with pytest.raises(SettingsError, match="not plain JSON"):
        save([Edit(good, {"k": 1}), Edit(bad, {"k": 1})])
    assert not good.exists()
    assert bad.read_bytes() == text


def test_mappings_merge_one_level_down() -> None:
    current = {"mcp": {"a": 1}, "model": "x", "keep": True}
    assert merged(current, {"mcp": {"b": 2}, "model": "y"}) == {
        "mcp": {"a": 1, "b": 2},
        "model": "y",
        "keep": True,
    }


def test_save_is_refused_for_aider_and_plain_commands_before_any_server() -> None:
    from click.testing import CliRunner

    from sakur4.cli import cli

    for args in (["aider", "--save"], ["--save", "aider"]):
        shown = CliRunner().invoke(cli, ["wrap", *args])
        assert shown.exit_code == 1
        assert "YAML" in str(shown.exception) + shown.output
    shown = CliRunner().invoke(cli, ["wrap", "--save", "--openai", "--", "true"])
    assert shown.exit_code == 1
    assert "set its variables yourself" in str(shown.exception) + shown.output


def test_the_store_travels_in_the_mcp_servers_environment_never_its_command_line() -> None:
    from sakur4.settings import Settings
    from sakur4.wrap.run import mcp_command

    url = "postgresql://team:s3cret@db.internal/sakur4"
    command = mcp_command(Settings.load(store=url), None)
    assert "s3cret" not in " ".join(command.args)  # `ps` shows every user the args
    assert "--store" not in command.args
    assert command.env["SAKUR4_STORE"] == url


def test_save_with_a_password_in_the_store_url_is_refused_before_any_server() -> None:
    from click.testing import CliRunner

    from sakur4.cli import cli

    url = "postgresql://team:s3cret@127.0.0.1:1/sakur4"
    shown = CliRunner().invoke(cli, ["--store", url, "wrap", "--save", "claude"])
    assert shown.exit_code != 0
    said = str(shown.exception) + shown.output
    assert "~/.pgpass" in said
    assert "s3cret" not in said
