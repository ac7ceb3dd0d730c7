"""Each harness's recipe sets the window and an output cap, registers ``sakur4 serve`` where
the harness takes an MCP server, and changes nothing outside the run's own directory.
OpenCode's is also read back by the real OpenCode (``opencode debug config``)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from sakur4.cli import cli
from sakur4.cli.wrap import plan_of
from sakur4.errors import SettingsError
from sakur4.harnesses.aider import aider_sizes
from sakur4.harnesses.recipes import (
    HARNESSES,
    TOLD_WINDOW,
    McpCommand,
    Target,
    harness,
    launch,
)
from sakur4.wrap.run import default_output_cap
from wrapped import INSTALL, OPENCODE_DIR, wrap_env

MCP = McpCommand("/venv/bin/python", ("-m", "sakur4", "serve"), {"SAKUR4_EMBEDDER": "none"})


def target(tmp_path: Path, mcp: McpCommand | None = MCP, token: str | None = None) -> Target:
    return Target("http://127.0.0.1:8741", "gemma", 200, tmp_path / "proj", mcp, token)


def test_claude_code_gets_the_model_the_cap_and_a_large_window(tmp_path: Path) -> None:
    run = launch(harness("claude"), target(tmp_path), ["-p", "hi"], tmp_path)
    env = run.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8741"
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "gemma"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "200"
    # Its 13,000-token compaction buffer exceeds a small window: it is told a large one.
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(TOLD_WINDOW)
    assert env["ANTHROPIC_API_KEY"] == "sk-local"
    assert env["ANTHROPIC_CUSTOM_HEADERS"] == f"X-Sakur4-Project: {tmp_path / 'proj'}"
    # --mcp-config takes several values: --model ends the list before the user's prompt.
    config = str(tmp_path / "mcp.json")
    assert run.argv == ("claude", "--mcp-config", config, "--model", "gemma", "-p", "hi")
    server = json.loads(run.files["mcp.json"])["mcpServers"]["sakur4"]
    assert server == {
        "type": "stdio",
        "command": "/venv/bin/python",
        "args": ["-m", "sakur4", "serve"],
        "env": {"SAKUR4_EMBEDDER": "none"},
    }
    assert run.mcp


def test_claude_code_sends_a_gateway_token_as_a_bearer(tmp_path: Path) -> None:
    run = launch(harness("claude"), target(tmp_path, None, token="s3cret"), [], tmp_path)
    assert run.env["ANTHROPIC_AUTH_TOKEN"] == "s3cret"
    assert "ANTHROPIC_API_KEY" not in run.env
    assert run.argv == ("claude", "--model", "gemma")
    assert not run.files
    assert not run.mcp


def test_opencode_gets_a_provider_with_window_and_output_limits(tmp_path: Path) -> None:
    run = launch(harness("opencode"), target(tmp_path), ["run", "hi"], tmp_path)
    assert run.argv == ("opencode", "run", "hi")
    config = json.loads(run.env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == config["small_model"] == "sakur4/gemma"
    provider = config["provider"]["sakur4"]
    assert provider["options"]["baseURL"] == "http://127.0.0.1:8741/v1"
    assert provider["models"]["gemma"]["limit"] == {"context": TOLD_WINDOW, "output": 200}
    assert config["mcp"]["sakur4"]["command"] == ["/venv/bin/python", "-m", "sakur4", "serve"]
    assert not run.files


def test_aider_gets_model_settings_with_max_tokens_and_metadata(tmp_path: Path) -> None:
    import yaml  # aider's own format; PyYAML comes with the test tools

    run = launch(harness("aider"), target(tmp_path), ["--message", "hi"], tmp_path)
    assert run.argv == ("aider", "--message", "hi")
    assert run.env["AIDER_MODEL"] == "openai/gemma"
    assert run.env["AIDER_OPENAI_API_BASE"] == "http://127.0.0.1:8741/v1"
    assert run.env["AIDER_MODEL_SETTINGS_FILE"] == str(tmp_path / ".aider.model.settings.yml")
    (settings,) = yaml.safe_load(run.files[".aider.model.settings.yml"])
    assert settings["name"] == "openai/gemma"
    assert settings["extra_params"]["max_tokens"] == 200
    assert settings["extra_params"]["extra_headers"] == {"X-Sakur4-Project": str(tmp_path / "proj")}
    meta = json.loads(run.files[".aider.model.metadata.json"])["openai/gemma"]
    assert meta["max_input_tokens"] == TOLD_WINDOW
    assert meta["max_output_tokens"] == 200
    assert not run.mcp
    assert run.notes


def test_aider_is_told_the_server_s_window_less_the_cap_and_a_map_that_fits(
    tmp_path: Path,
) -> None:
    at_8k = replace(target(tmp_path), server_window=8192)
    run = launch(harness("aider"), at_8k, [], tmp_path)
    meta = json.loads(run.files[".aider.model.metadata.json"])["openai/gemma"]
    assert meta["max_input_tokens"] == run.window == 8192 - 200
    sizes = aider_sizes(8192, 200)
    assert run.env["AIDER_MAP_TOKENS"] == str(sizes.map_tokens)
    no_files = float(run.env["AIDER_MAP_MULTIPLIER_NO_FILES"]) * sizes.map_tokens
    assert no_files == sizes.map_no_files
    assert sizes.map_no_files <= sizes.window // 2  # room for aider's prompt and the message
    assert any(f"{sizes.map_tokens:,} tokens" in n for n in run.notes)
    # Re-drawn when the chat's files change, not re-ranked for every message's names.
    assert run.env["AIDER_MAP_REFRESH"] == "files"
    # --window wins over the derived window; a server with no window: the large one.
    told = launch(harness("aider"), replace(at_8k, window=50_000), [], tmp_path)
    assert (
        json.loads(told.files[".aider.model.metadata.json"])["openai/gemma"]["max_input_tokens"]
        == 50_000
    )
    assert aider_sizes(None, 200).window == TOLD_WINDOW


def test_any_openai_command_gets_the_base_url_and_key(tmp_path: Path) -> None:
    run = launch(harness(None), target(tmp_path), ["python", "agent.py"], tmp_path)
    assert run.argv == ("python", "agent.py")
    assert run.env["OPENAI_BASE_URL"] == run.env["OPENAI_API_BASE"] == "http://127.0.0.1:8741/v1"
    assert run.env["OPENAI_API_KEY"] == "sk-local"
    assert run.notes


def test_codex_and_unknown_names_are_refused_with_the_reason() -> None:
    with pytest.raises(SettingsError, match="Responses API"):
        harness("codex")
    with pytest.raises(SettingsError, match="unknown harness 'cursor'"):
        harness("cursor")
    assert set(HARNESSES) == {"claude", "opencode", "aider", "codex"}


def test_the_cli_refuses_before_looking_for_any_server() -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["wrap", "codex"])
    assert shown.exit_code == 1
    assert "Responses API" in str(shown.exception) or "Responses API" in shown.output
    shown = runner.invoke(cli, ["wrap", "--openai"])
    assert shown.exit_code == 2
    assert "needs the command" in shown.output
    shown = runner.invoke(cli, ["wrap"])
    assert shown.exit_code == 2
    assert "name a harness" in shown.output


@pytest.mark.parametrize(
    ("window", "cap"), [(None, 1024), (2048, 256), (8192, 1024), (131072, 4096)]
)
def test_the_default_output_cap_is_an_eighth_of_the_window(window: int | None, cap: int) -> None:
    assert default_output_cap(window) == cap


def test_the_real_opencode_reads_the_limits_and_the_mcp_server(tmp_path: Path) -> None:
    binary = OPENCODE_DIR / "opencode"
    if not binary.exists():
        pytest.skip(f"OpenCode not installed: {INSTALL['opencode'][1]}")
    run = launch(harness("opencode"), target(tmp_path), [], tmp_path)
    env = wrap_env(tmp_path / "home", tmp_path / "store.db") | dict(run.env)
    done = subprocess.run(
        [str(binary), "debug", "config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-600:]
    resolved = json.loads(done.stdout)
    model = resolved["provider"]["sakur4"]["models"]["gemma"]
    assert model["limit"] == {"context": TOLD_WINDOW, "output": 200}
    assert resolved["mcp"]["sakur4"]["enabled"] is True
    assert resolved["small_model"] == "sakur4/gemma"


def test_the_separator_is_wrap_s_not_the_harness_s() -> None:
    # `sakur4 wrap claude -- -p hi`: Claude Code must get `-p hi`; given `-- -p hi` it
    # read everything as the prompt and dropped --output-format (seen in a real run).
    plan = plan_of("claude", ("--", "-p", "hi"), False, None, mcp=True)
    assert plan.args == ("-p", "hi")
    assert plan_of("claude", ("-p", "--", "x"), False, None, mcp=True).args == ("-p", "--", "x")
    plan = plan_of("python", ("agent.py",), True, 64, mcp=False)
    assert plan.args == ("python", "agent.py")
    assert plan.harness.name == "openai"
    assert plan.max_output == 64


def test_each_harness_says_why_it_is_told_a_large_window() -> None:
    # wrap prints it on every run: the choice and the measurement behind it, one line.
    for h in HARNESSES.values():
        if h.recipe is not None:
            assert "docs/harnesses.md" in h.window_why, h.name
            assert "\n" not in h.window_why
    assert "11,219 vs 10,595" in harness("opencode").window_why
