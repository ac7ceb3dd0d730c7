"""Per-harness recipes: the environment, flags and temporary files that point one run of
Claude Code, OpenCode, aider or any OpenAI-compatible command at the gateway and at
``sakur4 serve``, with the window and the output cap set (docs/harnesses.md).

A recipe only describes the run; :mod:`sakur4.wrap` writes the files into a temporary
directory and starts the command. Nothing here touches the user's own configuration.

The window told to Claude Code and OpenCode is :data:`TOLD_WINDOW`, not the server's:
the gateway keeps every prompt inside the real window. Chosen from
bench/harness_window.py (each harness's ``window_why``, printed by ``wrap``; figures in
docs/harnesses.md): told the server's window, OpenCode never compacted and processed 6%
more, and Claude Code refused every turn itself (it reserves 13,000 tokens plus the
answer's cap below the window). aider is told the server's window less the output cap,
with its repo map sized to fit (:func:`aider_sizes`, bench/aider_window.py): its map,
files and system prompt are current-turn content, which the gateway never folds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sakur4.errors import SettingsError

# The window every harness is told: large enough that none of them compacts or refuses
# by itself, so the gateway alone decides what the server sees.
TOLD_WINDOW = 1_000_000

# aider (issue 41, measured with bench/aider_window.py; docs/harnesses.md): the share of
# its window its repo map may take, and the floors below which aider is not usable.
AIDER_MAP_SHARE = 1 / 8
AIDER_MIN_MAP = 512
AIDER_MIN_WINDOW = 2048

# The gateway's key for a harness that must send one; the gateway on loopback needs none.
LOCAL_KEY = "sk-local"

# How a harness names the project its requests belong to (a reused gateway files the
# receipts under it, not under its own working directory).
PROJECT_HEADER = "X-Sakur4-Project"


@dataclass(frozen=True, slots=True)
class McpCommand:
    """How a harness starts ``sakur4 serve`` over stdio."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """What a run points the harness at."""

    gateway: str  # base URL without /v1, e.g. http://127.0.0.1:8741
    model: str  # the name the server serves
    max_output: int  # tokens one answer may take
    project: Path | None  # None: no project header (a saved config serves any project)
    mcp: McpCommand | None
    token: str | None = None  # SAKUR4_HTTP_TOKEN, when the gateway requires one
    window: int | None = None  # the window the harness is told (None: the harness's choice)
    server_window: int | None = None  # the server's real window, when it reports one

    @property
    def openai_base(self) -> str:
        return f"{self.gateway}/v1"

    @property
    def key(self) -> str:
        return self.token or LOCAL_KEY


@dataclass(frozen=True, slots=True)
class Launch:
    """One run of a harness: its command line, the environment added for it, and the
    files (name -> text) written into the run's temporary directory first."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    mcp: bool = False  # whether the run registers ``sakur4 serve`` with the harness
    window: int | None = None  # the window the harness was told (None: not told one)


Recipe = Callable[[Target, Sequence[str], Path], Launch]


@dataclass(frozen=True, slots=True)
class Harness:
    name: str
    describe: str
    executable: str | None  # None: the command comes from the user (--openai)
    recipe: Recipe | None  # None: not supported, ``refusal`` says why
    refusal: str = ""
    # Why the harness is told TOLD_WINDOW, in one line (wrap prints it): the measurement.
    window_why: str = ""


def _claude(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    # Claude Code's environment variables (code.claude.com/docs/en/env-vars, "Model
    # configuration"): for a model id that does not start with "claude-", the declared
    # window applies as it is, and autocompaction fires at window - 13,000 - the answer's
    # cap, so only a large window is safe here.
    env = {
        "ANTHROPIC_BASE_URL": t.gateway,  # no /v1: Claude Code adds /v1/messages
        "ANTHROPIC_MODEL": t.model,
        # Titles, subagents and the "fast" model go to the same local model.
        "ANTHROPIC_DEFAULT_OPUS_MODEL": t.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": t.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": t.model,
        "ANTHROPIC_SMALL_FAST_MODEL": t.model,
        "CLAUDE_CODE_SUBAGENT_MODEL": t.model,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(t.max_output),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(t.window or TOLD_WINDOW),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if t.project is not None:
        env["ANTHROPIC_CUSTOM_HEADERS"] = f"{PROJECT_HEADER}: {t.project}"
    # ANTHROPIC_API_KEY goes out as X-Api-Key; a gateway with a token wants a Bearer.
    env["ANTHROPIC_AUTH_TOKEN" if t.token else "ANTHROPIC_API_KEY"] = t.key
    argv: list[str] = ["claude"]
    files: dict[str, str] = {}
    if t.mcp is not None:
        files["mcp.json"] = json.dumps(
            {
                "mcpServers": {
                    "sakur4": {
                        "type": "stdio",
                        "command": t.mcp.command,
                        "args": list(t.mcp.args),
                        "env": dict(t.mcp.env),
                    }
                }
            },
            indent=2,
        )
        # --mcp-config takes several values: the --model after it ends the list, so a
        # prompt given as the first argument is not read as a second config file. A
        # --model among the user's arguments comes later and wins.
        argv += ["--mcp-config", str(tmp / "mcp.json")]
    argv += ["--model", t.model, *args]
    return Launch(tuple(argv), env, files, mcp=t.mcp is not None, window=t.window or TOLD_WINDOW)


def _headers(t: Target) -> dict[str, dict[str, str]]:
    return {"headers": {PROJECT_HEADER: str(t.project)}} if t.project is not None else {}


def _opencode(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    # OPENCODE_CONFIG_CONTENT is merged over the user's own opencode.json files for this
    # run. "limit.output" caps every request, the title request included: without it a
    # small model wrote ~2,150 tokens of title for 10 minutes (issue 30).
    config: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"sakur4/{t.model}",
        "small_model": f"sakur4/{t.model}",
        "provider": {
            "sakur4": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Sakur4 gateway",
                "options": {
                    "baseURL": t.openai_base,
                    "apiKey": t.key,
                    **_headers(t),
                },
                "models": {
                    t.model: {
                        "name": t.model,
                        "limit": {"context": t.window or TOLD_WINDOW, "output": t.max_output},
                    }
                },
            }
        },
    }
    if t.mcp is not None:
        config["mcp"] = {
            "sakur4": {
                "type": "local",
                "command": [t.mcp.command, *t.mcp.args],
                "environment": dict(t.mcp.env),
                "enabled": True,
            }
        }
    env = {
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        # The provider is declared here: no need to fetch the public model catalogue.
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }
    window = t.window or TOLD_WINDOW
    return Launch(("opencode", *args), env, mcp=t.mcp is not None, window=window)


@dataclass(frozen=True, slots=True)
class AiderSizes:
    """What aider is told: the window (its ``max_input_tokens``) and the repo map's
    budget, with files in the chat and without."""

    window: int
    map_tokens: int
    map_no_files: int

    @property
    def multiplier(self) -> float:
        return self.map_no_files / self.map_tokens


def aider_sizes(server_window: int | None, max_output: int) -> AiderSizes:
    """aider's window and repo map, derived from the server's window and the output cap.

    aider's repo map, its system prompt and the files in its chat are current-turn
    content, which the gateway never folds; aider sizes its map from the window it is
    told (an eighth of it, 1,024-4,096 tokens, times 2 with no file in the chat), so told
    1,000,000 its map grew to ~8,000 tokens and with its prompt overflowed an 8,192
    window on every turn (issue 41). Told the server's window less the answer's cap,
    what aider sends fits where the answer still has room; the map gets
    :data:`AIDER_MAP_SHARE` of that, twice that with no file in the chat (capped at
    aider's own 4,096). A server that reports no window: the large window, as before."""
    if server_window is None:
        return AiderSizes(TOLD_WINDOW, 4096, 8192)
    window = max(server_window - max_output, AIDER_MIN_WINDOW)
    map_tokens = max(AIDER_MIN_MAP, min(4096, int(window * AIDER_MAP_SHARE)))
    return AiderSizes(window, map_tokens, min(8192, 2 * map_tokens))


def _aider(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    # Aider reads AIDER_* variables below its command-line flags, so the user's own flags
    # still win. The settings file caps each answer (max_tokens) and names the project;
    # the metadata file gives the window, without which aider reports a window of 0.
    sizes = aider_sizes(t.server_window, t.max_output)
    window = t.window or sizes.window
    model = f"openai/{t.model}"
    headers = json.dumps(_headers(t).get("headers", {}))
    settings = (
        f"- name: {json.dumps(model)}\n"
        "  extra_params:\n"
        f"    max_tokens: {t.max_output}\n"
        f"    extra_headers: {headers}\n"
    )
    metadata = {
        model: {
            "max_input_tokens": window,
            "max_output_tokens": t.max_output,
            "max_tokens": t.max_output,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }
    env = {
        "AIDER_MODEL": model,
        "AIDER_WEAK_MODEL": model,
        "AIDER_EDITOR_MODEL": model,
        "AIDER_OPENAI_API_BASE": t.openai_base,
        "AIDER_OPENAI_API_KEY": t.key,
        "AIDER_MODEL_SETTINGS_FILE": str(tmp / ".aider.model.settings.yml"),
        "AIDER_MODEL_METADATA_FILE": str(tmp / ".aider.model.metadata.json"),
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_SHOW_RELEASE_NOTES": "false",
        "AIDER_ANALYTICS": "false",  # this session only (--analytics-disable is permanent)
        # The repo map sized to the window (aider's own sizing follows the told window).
        "AIDER_MAP_TOKENS": str(sizes.map_tokens),
        "AIDER_MAP_MULTIPLIER_NO_FILES": f"{sizes.multiplier:g}",
        # The map is re-ranked for the names each message mentions ("auto") and sits
        # before the history: every question naming another file re-processed all of
        # it (400 of 6,621 tokens reused, bench/aider_window.py). "files": re-drawn only
        # when the files in the chat change.
        "AIDER_MAP_REFRESH": "files",
    }
    files = {
        ".aider.model.settings.yml": settings,
        ".aider.model.metadata.json": json.dumps(metadata, indent=2),
    }
    notes: tuple[str, ...] = (
        f"aider's repo map: {sizes.map_tokens:,} tokens, {sizes.map_no_files:,} with no file "
        "in the chat (--map-tokens to change it)",
    )
    if t.mcp is not None:
        notes += ("aider has no MCP client: the memory tools are not offered to it",)
    return Launch(("aider", *args), env, files, notes, window=window)


def _openai(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    env = {
        "OPENAI_BASE_URL": t.openai_base,  # the openai SDKs
        "OPENAI_API_BASE": t.openai_base,  # LiteLLM and older clients
        "OPENAI_API_KEY": t.key,
        "OPENAI_MODEL": t.model,
    }
    notes = (
        "an unknown command: its window and output cap are its own settings; "
        "set the output cap, or a small model may write until the window is full",
    )
    return Launch(tuple(args), env, notes=notes)


HARNESSES: dict[str, Harness] = {
    "claude": Harness(
        "claude",
        "Claude Code",
        "claude",
        _claude,
        window_why="measured: told the server's, Claude Code refused every turn itself "
        "(Prompt is too long); the gateway keeps the prompt inside (docs/harnesses.md)",
    ),
    "opencode": Harness(
        "opencode",
        "OpenCode",
        "opencode",
        _opencode,
        window_why="measured: told the server's, OpenCode never compacted and processed 6% "
        "more (11,219 vs 10,595 tokens, 0 turns failed either way; docs/harnesses.md)",
    ),
    "aider": Harness(
        "aider",
        "aider",
        "aider",
        _aider,
        window_why="the server's less the output cap, measured: told 1,000,000, aider's "
        "repo map overflowed an 8,192 window (1 of 4 turns refused, 4.1% reuse); told this, "
        "with the map below, 4 of 4 served, 49% reuse, 90% once files were in the chat "
        "(docs/harnesses.md)",
    ),
    "codex": Harness(
        "codex",
        "Codex CLI",
        "codex",
        None,
        refusal="Codex CLI speaks only the OpenAI Responses API (/v1/responses) since "
        '0.122 (wire_api = "chat" was removed), and the gateway serves Chat Completions '
        "and Anthropic Messages: Codex cannot run through Sakur4 yet",
    ),
}
OPENAI = Harness("openai", "an OpenAI-compatible command", None, _openai)


def harness(name: str | None) -> Harness:
    """The harness called ``name`` (None: the OpenAI-compatible command)."""
    if name is None:
        return OPENAI
    found = HARNESSES.get(name)
    if found is None:
        known = ", ".join(HARNESSES)
        raise SettingsError(
            f"unknown harness {name!r}: one of {known}, or --openai -- CMD for another"
        )
    if found.recipe is None:
        raise SettingsError(f"{found.describe}: {found.refusal}")
    return found


def launch(h: Harness, target: Target, args: Sequence[str], tmp: Path) -> Launch:
    """The run of ``h`` pointed at ``target`` with the user's ``args``."""
    assert h.recipe is not None, h.name
    return h.recipe(target, args, tmp)
