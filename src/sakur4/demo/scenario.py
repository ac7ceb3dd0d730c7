"""A scripted, deterministic coding-agent session over a real source tree.

It replays what a harness sends: a system prompt, user requests, the agent's tool
calls (read a file, search, run the tests) with their long results, and short
answers. The assistant's words are scripted, not generated, so every strategy
and every run sees the same conversation; the server only generates a few tokens
per request. Early on the user corrects the agent, and that correction is the
constraint an anchor must keep alive.
"""

from __future__ import annotations

import json
import random
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = (
    "You are a careful coding agent working in a Python repository. Use the tools to "
    "read files, search and run the tests before you change anything. Answer briefly, "
    "cite the file and function you mean, and never invent an API."
)

CORRECTION = (
    "Correction, keep this for the whole session: do not edit json/decoder.py, and run "
    "the test suite with `-x` before proposing any change."
)

# Areas of the standard library the agent explores, in order; real files, real sizes.
DEFAULT_FILES = (
    "json/__init__.py",
    "json/decoder.py",
    "json/encoder.py",
    "json/scanner.py",
    "json/tool.py",
    "http/cookies.py",
    "http/client.py",
    "http/server.py",
    "email/utils.py",
    "email/header.py",
    "email/message.py",
    "email/parser.py",
    "csv.py",
    "shlex.py",
    "textwrap.py",
    "difflib.py",
    "string.py",
    "fnmatch.py",
    "glob.py",
    "tempfile.py",
    "configparser.py",
    "argparse.py",
    "gettext.py",
    "calendar.py",
    "zipfile.py",
    "tarfile.py",
    "pprint.py",
    "reprlib.py",
)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite",
            "parameters": {
                "type": "object",
                "properties": {"args": {"type": "array", "items": {"type": "string"}}},
            },
        },
    },
]


def default_repo() -> Path:
    """The interpreter's own standard library: a real tree present on every machine."""
    return Path(sysconfig.get_paths()["stdlib"])


@dataclass(frozen=True)
class ToolStep:
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Need:
    """A turn that asks about an earlier ``read_file`` result: the agent needs its
    content in the prompt, and fetches it again when the prompt lacks it."""

    turn: int
    source_turn: int
    call_id: str  # the read_file call whose result is needed
    path: str
    content: str


@dataclass(frozen=True)
class Turn:
    index: int
    user: str
    steps: tuple[ToolStep, ...]
    answer: str
    pin: str | None = None
    need: Need | None = None


@dataclass
class Session:
    """``environment``/``attach_reads``: Claude Code's shape (issue 30): its environment
    as a system message after the first user message, and each ``read_file`` result
    attached to the user's message as ``Called the Read tool …``/``Result of calling
    the Read tool:`` reminders rather than sent as a tool call and its result."""

    turns: list[Turn]
    system: str = SYSTEM_PROMPT
    anchor: str = CORRECTION
    tools: list[dict[str, Any]] = field(default_factory=lambda: list(TOOLS))
    environment: str | None = None
    attach_reads: bool = False


def attached(step: ToolStep) -> str:
    """A ``read_file`` result as Claude Code attaches a file to the user's message."""
    called = json.dumps({"file_path": step.arguments.get("path", "")})
    return (
        f"<system-reminder>\nCalled the Read tool with the following input: {called}\n"
        f"</system-reminder>\n\n<system-reminder>\nResult of calling the Read tool:\n"
        f"{step.result}\n</system-reminder>"
    )


def _excerpt(path: Path, max_chars: int) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    out: list[str] = []
    size = 0
    for i, line in enumerate(lines, 1):
        row = f"{i:5}  {line}"
        if size + len(row) + 1 > max_chars:
            out.append(f"... ({len(lines) - i + 1} more lines)")
            break
        out.append(row)
        size += len(row) + 1
    return "\n".join(out)


def _test_log(rng: random.Random, module: str, n: int) -> str:
    rows = [
        "============================= test session starts ==============================",
        f"collected {n} items",
        "",
    ]
    for i in range(n):
        outcome = "PASSED" if rng.random() > 0.04 else "FAILED"
        kind = rng.choice(["parse", "dump", "roundtrip", "edge", "unicode"])
        rows.append(f"tests/test_{module}.py::test_case_{i:03d}_{kind} {outcome}")
    rows.append("")
    rows.append(
        f"======================= {n} items in {rng.uniform(1, 9):.2f}s ======================="
    )
    return "\n".join(rows)


def build_session(
    repo: Path | None = None,
    turns: int = 24,
    file_chars: int = 3600,
    seed: int = 7,
    files: tuple[str, ...] = DEFAULT_FILES,
) -> Session:
    """A deterministic session of ``turns`` turns over files of ``repo``."""
    root = repo or default_repo()
    rng = random.Random(seed)  # noqa: S311 - a reproducible script, not a secret
    present = [f for f in files if (root / f).is_file()]
    if not present:
        raise FileNotFoundError(f"none of the scenario's files exist under {root}")
    out: list[Turn] = []
    for t in range(turns):
        rel = present[t % len(present)]
        module = Path(rel).stem
        steps = [
            ToolStep(f"call_{t}_0", "read_file", {"path": rel}, _excerpt(root / rel, file_chars))
        ]
        if t % 3 == 2:
            steps.append(
                ToolStep(
                    f"call_{t}_1",
                    "run_tests",
                    {"args": ["-x", "-q", module]},
                    # Test logs scale with the file excerpts, so a short script
                    # keeps the same proportions (40-79 tests at 3,600 characters).
                    _test_log(rng, module, max(4, (40 + rng.randrange(40)) * file_chars // 3600)),
                )
            )
        if t == 0:
            user = (
                f"We need to understand how {rel} works before fixing a bug in its "
                "error messages. Start by reading it."
            )
        else:
            user = f"Next, look at {rel}: how does it relate to what we saw so far?"
        answer = (
            f"{rel} read ({len(steps)} tool call{'s' if len(steps) > 1 else ''}). "
            f"It defines the pieces used by {module}; nothing to change yet."
        )
        out.append(
            Turn(
                index=t,
                user=user,
                steps=tuple(steps),
                answer=answer,
                pin=CORRECTION if t == 1 else None,
            )
        )
    return Session(turns=out)


def assistant_call(step: ToolStep) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": step.call_id,
                "type": "function",
                "function": {"name": step.name, "arguments": json.dumps(step.arguments)},
            }
        ],
    }


def tool_result(step: ToolStep) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": step.call_id, "content": step.result}


@dataclass(frozen=True)
class Request:
    """One model call of the replay: the history the harness sends at that moment."""

    turn: int
    step: int
    messages: list[dict[str, Any]]
    pin: str | None = None
    reread: str | None = None  # the tool a re-read call used (None: a scripted call)
