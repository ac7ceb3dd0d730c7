"""Claude Code (Anthropic's CLI; 2.1.332 recorded in tests/fixtures/harnesses): its
User-Agent and session headers, its reminders' natures, its billing header, its
compaction request that extends the conversation, its run and saved configuration.

- On the wire: User-Agent ``claude-cli/…``; its system prompt opens with "You are
  Claude Code" after a billing header line; it names its session in
  ``X-Claude-Code-Session-Id`` and a subagent's in ``X-Claude-Code-Agent-Id``
  (tests/fixtures/harnesses/claude_code_subagent.json).
- Its messages: its environment comes as a ``system`` message after the first user
  message, and in ``-p --continue`` an attached file as ``<system-reminder>`` blocks
  inside the user's message, next to the user's words. Attachments become ``Called the
  Read tool with the following input: {…}`` and ``Result of calling the Read tool:\\n…``
  reminders (also ``Note: … changed on disk since you last read it``): tool output;
  other reminders (attribution, CLAUDE.md context, dates) are instructions.
- Its churn: an ``x-anthropic-billing-header: …; cch=<hash>;`` line opening the system
  prompt, whose hash changes every request (billing metadata for Anthropic's API,
  meaningless to a local model: dropped), and reminders it rewrites in its history.
- Its compaction (tests/fixtures/harnesses/claude_code_compact.json): the same system
  prompt, tools and messages, with its summariser's instruction as one more text block
  of the last user message: it already extends the cached prompt.
- Its run: environment variables (code.claude.com/docs/en/env-vars); ``--save`` writes
  ``settings.json`` (its ``env``) and ``.claude.json`` (``mcpServers``, the user scope
  of ``claude mcp add``), in ``CLAUDE_CONFIG_DIR`` when set, else ``~/.claude``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sakur4.harnesses.base import (
    PROJECT_HEADER,
    REMINDER,
    REMINDER_OPEN,
    TOLD_WINDOW,
    Edit,
    ExtendsConversation,
    Harness,
    Launch,
    SessionIds,
    Slices,
    Target,
    VolatileLine,
    Wrap,
    home_of,
    joined_text,
    message_text,
)
from sakur4.vocabulary import Nature

DISPLAY = "Claude Code"
# Claude Code's attachments (its Tve/zJe helpers) and file notes: how a reminder's text
# opens, right after its opening tag.
_TOOL = re.compile(
    r"\s*(?:Called the \S+ tool with the following input:"
    r"|Result of calling the \S+ tool:"
    r"|Note: .{0,600}?(?:changed on disk since you last read it"
    r"|is not shown exactly as it is on disk))",
    re.S,
)
# Its summariser's instruction, inside its compaction request's last user message.
COMPACTION_TASK = "Your task is to create a detailed summary of the conversation so far"
# The billing header: ``x-anthropic-billing-header:`` and ``key=value;`` fields
# (``cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;``, with ``cch=…;`` in some
# versions); the text after it starts the real prompt, on the same line when the system
# blocks were joined.
BILLING = VolatileLine(
    "billing-header",
    "x-anthropic-billing-header:",
    "cch=",
    re.compile(r"x-anthropic-billing-header:(?:[ \t]*[a-z_]+=[^;\n]*;)+[ \t]*\n?"),
)
# The run's variables that belong to this run only, not to a saved configuration.
RUN_ONLY = ("ANTHROPIC_CUSTOM_HEADERS",)


def _sent(system: str, messages: Sequence[Mapping[str, Any]]) -> bool:
    return "Claude Agent SDK" in system or "Claude Code" in system


def _slices(message: Mapping[str, Any]) -> Slices:
    """Reminder blocks and the user's words between them; whitespace between two
    slices stays with the one before (so a folded slice keeps its separator)."""
    text = message_text(message)
    if text is None:
        return [(joined_text(message) or "", Nature.UNCLASSIFIED)]
    out: Slices = []
    pos = 0
    lead = ""
    for match in REMINDER.finditer(text):
        between = text[pos : match.start()]
        if between.strip():
            words = between.lstrip()
            if out:
                out[-1] = (out[-1][0] + between[: len(between) - len(words)], out[-1][1])
            else:
                words = between
            out.append((lead + words, Nature.REQUEST))
            lead = ""
        elif out:
            out[-1] = (out[-1][0] + between, out[-1][1])
        else:
            lead += between
        block = match.group(0)
        attached = _TOOL.match(block, len(REMINDER_OPEN)) is not None
        nature = Nature.TOOL_OUTPUT if attached else Nature.INSTRUCTION
        out.append((lead + block, nature))
        lead = ""
        pos = match.end()
    rest = text[pos:]
    if rest.strip() and out:
        words = rest.lstrip()
        out[-1] = (out[-1][0] + rest[: len(rest) - len(words)], out[-1][1])
        out.append((words, Nature.REQUEST))
    elif rest.strip() or not out:
        out.append((lead + rest, Nature.REQUEST))
    else:
        out[-1] = (out[-1][0] + rest, out[-1][1])
    return out


def _recipe(t: Target, args: Sequence[str], tmp: Path) -> Launch:
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


def _saved(run: Launch, environ: Mapping[str, str]) -> list[Edit]:
    home = home_of(environ)
    config = environ.get("CLAUDE_CONFIG_DIR")
    settings = Path(config) / "settings.json" if config else home / ".claude/settings.json"
    state = Path(config) / ".claude.json" if config else home / ".claude.json"
    env = {k: v for k, v in run.env.items() if k not in RUN_ONLY}
    out = [Edit(settings, {"env": env})]
    if "mcp.json" in run.files:
        servers = json.loads(run.files["mcp.json"])["mcpServers"]
        out.append(Edit(state, {"mcpServers": servers}))
    return out


HARNESS = Harness(
    "claude-code",
    DISPLAY,
    order=10,
    agents=("claude-cli",),
    openings=("You are Claude Code",),
    session=SessionIds(
        "x-claude-code-session-id", "claude-", agent_header="x-claude-code-agent-id"
    ),
    sent=_sent,
    slices=_slices,
    repairs=("billing-header", "system-reminder"),
    volatile=BILLING,
    compaction=ExtendsConversation(COMPACTION_TASK),
    wrap=Wrap(
        "claude",
        DISPLAY,
        "claude",
        _recipe,
        window_why="measured: told the server's, Claude Code refused every turn itself "
        "(Prompt is too long); the gateway keeps the prompt inside (docs/harnesses.md)",
        saved=_saved,
    ),
)
