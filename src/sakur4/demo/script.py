"""The scripted session generator the benchmark and ``sakur4 demo`` share.

A coding-agent session as a harness sends it: a long harness head (a system prompt
and the tool schemas, real-looking text built from the interpreter's own standard
library docstrings), user requests, 1-3 tool calls a turn whose results are real
standard-library file excerpts, grep output and test logs cut to a size drawn
log-uniformly from a stated range, and answers of ~100 tokens, each distinct. At
turn 1 the user corrects the agent; that correction is pinned as an anchor. A
share of the turns (*need* turns) ask about a ``read_file`` result from a few
turns back: the scripted agent fetches it again when the prompt lacks it
(:mod:`sakur4.demo.agent`).

Everything is drawn from one seeded generator over files of the running
interpreter's standard library, so a (parameters, seed) pair is the same session
on every machine with the same Python; :attr:`ScriptParams.key` names it.
Sizes are in estimated tokens (characters / :data:`CHARS_PER_TOKEN`); the bench
states the measured sizes beside them.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from sakur4.demo.scenario import (
    CORRECTION,
    Need,
    Session,
    ToolStep,
    Turn,
    build_session,
    default_repo,
)

# Measured on the packaged model's tokenizer over this generator's output
# (docs/design/eviction.md): line-numbered code and logs, 2.79-2.88 characters a token.
CHARS_PER_TOKEN = 2.85
# The head's prose and JSON schemas: 3.43-3.6 characters a token, measured likewise.
HEAD_CHARS_PER_TOKEN = 3.5


@dataclass(frozen=True, slots=True)
class ScriptParams:
    """Everything that decides the session; stated in every table."""

    name: str
    window: int  # the managed runs' -c
    turns: int
    head_tokens: int  # harness head: system prompt + tool schemas
    result_tokens: tuple[int, int]  # tool results, log-uniform in this range
    calls_per_turn: tuple[int, int] = (1, 3)
    answer_tokens: int = 100
    need_share: float = 0.3  # share of turns (from turn 2 on) that ask about an earlier read
    need_distance: tuple[int, int] = (1, 8)  # turns back, uniform
    seed: int = 7
    published: bool = False  # the published small script (scenario.build_session)
    file_chars: int = 600  # the published script's file cut
    # "claude-code": the session as Claude Code sends it (issue 30): its opening line
    # and environment, files read attached inside the user's messages.
    shape: Literal["tools", "claude-code"] = "tools"

    @property
    def key(self) -> str:
        """A short name for the session these parameters make (cache file names)."""
        fields = asdict(self)
        if fields["shape"] == "tools":
            del fields["shape"]  # the sessions generated before shapes keep their names
        blob = json.dumps(
            {**fields, "name": None, "python": sys.version.split()[0], "v": 1},
            sort_keys=True,
        )
        return f"{self.name}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"

    def describe(self) -> str:
        if self.published:
            return (
                f"{self.name}: the published script ({self.turns} turns, files cut at "
                f"{self.file_chars:,} characters, one read a turn, a test log every third), "
                f"window {self.window:,}, no need turns, seed {self.seed}"
            )
        lo, hi = self.result_tokens
        c0, c1 = self.calls_per_turn
        d0, d1 = self.need_distance
        return (
            f"{self.name}: window {self.window:,}, {self.turns} turns, harness head "
            f"~{self.head_tokens:,} tokens (system prompt + {len(TOOL_NAMES)} tool schemas), "
            f"results {lo:,}-{hi:,} tokens log-uniform, {c0}-{c1} tool calls a turn, "
            f"~{self.answer_tokens}-token answers, need turns {self.need_share:.0%} of "
            f"turns 2+ asking about a read_file result {d0}-{d1} turns back (uniform), "
            f"correction pinned at turn 1, seed {self.seed} "
            f"(sizes estimated at {CHARS_PER_TOKEN} characters a token)"
            + (
                "; in Claude Code's shape: environment after the first request, files "
                "read attached inside the user's messages"
                if self.shape == "claude-code"
                else ""
            )
        )


PRESETS: dict[str, ScriptParams] = {
    "S8": ScriptParams("S8", 8192, 30, 2500, (300, 2000)),
    "S8cc": ScriptParams("S8cc", 8192, 30, 2500, (300, 2000), shape="claude-code"),
    "S16": ScriptParams("S16", 16384, 45, 4000, (500, 4000)),
    "S32": ScriptParams("S32", 32768, 60, 6000, (500, 4000)),
    "small": ScriptParams("small", 1536, 8, 0, (0, 0), published=True, need_share=0.0),
    "demo": ScriptParams("demo", 4096, 14, 1000, (80, 320), calls_per_turn=(1, 2)),
}


def preset(name: str) -> ScriptParams:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown size {name!r} (one of {', '.join(PRESETS)})") from None


# ---------------------------------------------------------------------------
# Real text from the standard library


@cache
def _sources(root: Path) -> tuple[str, ...]:
    """Standard-library modules big enough to read from, sorted (deterministic)."""
    skip = (
        "test",
        "idlelib",
        "lib2to3",
        "site-packages",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "encodings",  # code-page tables, not code an agent reads
        "pydoc_data",
    )
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in skip or "/tests/" in rel or rel.startswith("__"):
            continue
        try:
            if p.stat().st_size >= 6000:
                out.append(rel)
        except OSError:
            continue
    if not out:
        raise FileNotFoundError(f"no standard-library sources under {root}")
    return tuple(out)


@cache
def _lines(root: Path, rel: str) -> tuple[str, ...]:
    return tuple((root / rel).read_text(encoding="utf-8", errors="replace").splitlines())


@cache
def _docstrings(root: Path, rel: str) -> tuple[tuple[str, str], ...]:
    """(qualified name, docstring) of a module and its functions and classes."""
    try:
        tree = ast.parse("\n".join(_lines(root, rel)))
    except SyntaxError:
        return ()
    out = []
    mod = ast.get_docstring(tree)
    if mod:
        out.append((rel, mod))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc and len(doc) > 120:
                out.append((f"{rel}:{node.name}", doc))
    return tuple(out)


def _cut(rows: list[str], chars: int) -> str:
    out: list[str] = []
    size = 0
    for row in rows:
        if size + len(row) + 1 > chars and out:
            break
        out.append(row)
        size += len(row) + 1
    return "\n".join(out)


# ---------------------------------------------------------------------------
# The harness head

INSTRUCTIONS = """\
You are a coding agent working in a Python repository on the user's machine. You help \
with software engineering tasks: reading code, finding the cause of a bug, running the \
tests, and proposing small, reviewed changes.

# How to work
- Read before you write. Use read_file to look at a file and grep to find where a name \
is defined or used; never guess an API or a path.
- Run the tests with run_tests before you propose a change and after you make one.
- Keep answers short: name the file and the function you mean, quote the line when it \
matters, and say what you will do next.
- Do not edit a file the user asked you to leave alone. Follow every correction the \
user gives for the rest of the session.
- When a tool result is long, say what in it matters; you can read it again later.

# Tone
Be direct and precise. Prefer plain words to jargon. If you are unsure, say so and \
say how you would find out.
"""

# Claude Code's own opening line and the shape of its environment message (recorded:
# tests/fixtures/harnesses/claude_code_p_continue.json), for the "claude-code" shape.
CLAUDE_CODE_OPENING = "You are a Claude agent, built on Anthropic's Claude Agent SDK."
CLAUDE_CODE_ENVIRONMENT = """\
# Environment
You have been invoked in the following environment:
 - Primary working directory: /work/repo
 - Is a git repository: true
 - Platform: linux
 - Shell: bash

You are powered by the model local."""

TOOL_NAMES = (
    "read_file",
    "grep",
    "run_tests",
    "list_dir",
    "glob",
    "edit_file",
    "write_file",
    "run_shell",
    "git_diff",
    "open_fold",
    "recall",
)

# Each tool's own first line, then the docstring of the standard-library routine it
# wraps, as long as the budget allows (harness tool descriptions are this long).
_TOOL_SOURCES = {
    "read_file": ("Read a file of the repository, with line numbers.", "pathlib.py"),
    "grep": ("Search the repository for a regular expression.", "re/__init__.py"),
    "run_tests": ("Run the test suite (pytest arguments).", "unittest/main.py"),
    "list_dir": ("List a directory of the repository.", "os.py"),
    "glob": ("Find files by a glob pattern.", "glob.py"),
    "edit_file": ("Replace an exact string in a file.", "difflib.py"),
    "write_file": ("Write a whole file.", "shutil.py"),
    "run_shell": ("Run a shell command in the repository.", "subprocess.py"),
    "git_diff": ("Show the working tree's changes.", "filecmp.py"),
    "open_fold": (
        "Sakur4: return a folded item of this conversation in full, by its episode id.",
        "",
    ),
    "recall": ("Sakur4: search everything said in this session.", ""),
}

_TOOL_ARGS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "string", "offset": "integer", "limit": "integer"},
    "grep": {"pattern": "string", "path": "string"},
    "run_tests": {"args": "array"},
    "list_dir": {"path": "string"},
    "glob": {"pattern": "string"},
    "edit_file": {"path": "string", "old": "string", "new": "string"},
    "write_file": {"path": "string", "content": "string"},
    "run_shell": {"command": "string"},
    "git_diff": {"path": "string"},
    "open_fold": {"id": "integer"},
    "recall": {"query": "string"},
}


def _schema(name: str, description: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for arg, kind in _TOOL_ARGS[name].items():
        props[arg] = {"type": kind} | ({"items": {"type": "string"}} if kind == "array" else {})
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": [next(iter(_TOOL_ARGS[name]))],
            },
        },
    }


def harness_head(root: Path, head_tokens: int) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, tool schemas) of about ``head_tokens`` tokens in all: 40% in the
    tool descriptions, the rest the instructions and a reference section of
    standard-library module docstrings (the project notes a harness appends).

    The schemas are written into the system prompt as well, the way llama.cpp's
    generic tool format and harnesses for models without native tool calls send them:
    the packaged model's template ignores the request's ``tools``, and a head without
    them would be a fraction of what a harness sends."""
    budget = int(head_tokens * HEAD_CHARS_PER_TOKEN)
    per_tool = int(budget * 0.4 / len(TOOL_NAMES))
    tools = []
    for name in TOOL_NAMES:
        first, src = _TOOL_SOURCES[name]
        text = first
        if src and (root / src).is_file():
            docs = " ".join(d for _, d in _docstrings(root, src)[:3])
            text = f"{first}\n\n{docs}"
        tools.append(_schema(name, text[: max(per_tool, len(first))]))
    notes = []
    size = len(INSTRUCTIONS) + sum(len(json.dumps(t)) for t in tools)
    for rel in ("json/__init__.py", "http/client.py", "email/message.py", "argparse.py"):
        for qual, doc in _docstrings(root, rel):
            if size >= budget:
                break
            piece = f"## {qual}\n{doc}\n"
            notes.append(piece[: budget - size + 1])
            size += len(notes[-1])
    listed = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    system = (
        INSTRUCTIONS
        + f"\n# Tools\n\nYou can call these tools (JSON schemas):\n{listed}\n"
        + ("\n# Project notes\n\n" + "\n".join(notes) if notes else "")
    )
    return system, tools


# ---------------------------------------------------------------------------
# Tool results


def _size(rng: random.Random, lo: int, hi: int) -> int:
    """Tokens, log-uniform in [lo, hi]."""
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _chars(root: Path, rel: str) -> int:
    return sum(len(line) + 8 for line in _lines(root, rel))


def _offset(rng: random.Random, root: Path, rel: str, chars: int) -> int:
    """A first line from which the file still has ``chars`` characters to show."""
    lines = _lines(root, rel)
    tail, last = 0, len(lines)
    while last > 0 and tail < chars:
        last -= 1
        tail += len(lines[last]) + 8
    return rng.randrange(last + 1)


def _read(root: Path, rel: str, offset: int, chars: int) -> str:
    lines = _lines(root, rel)
    rows = [f"{i:6}\t{line}" for i, line in enumerate(lines[offset:], offset + 1)]
    return _cut(rows, chars)


def _grep(root: Path, files: Sequence[str], word: str, chars: int) -> str:
    rows = []
    size = 0
    for rel in files[:400]:
        for i, line in enumerate(_lines(root, rel), 1):
            if word in line:
                row = f"{rel}:{i}:{line.strip()}"
                rows.append(row)
                size += len(row) + 1
                if size >= chars:
                    return _cut(rows, chars)
    return _cut(rows, chars) or f"no match for {word!r}"


def _test_log(rng: random.Random, root: Path, rel: str, chars: int) -> str:
    module = Path(rel).stem
    rows = [
        "============================= test session starts ==============================",
        f"platform linux -- Python {sys.version.split()[0]}, pytest-8.3.4",
        f"collected {max(4, chars // 70)} items",
        "",
    ]
    lines = _lines(root, rel)
    failed_at = rng.randrange(len(lines))
    i = 0
    while sum(len(r) + 1 for r in rows) < chars * 0.8:
        kind = rng.choice(["parse", "dump", "roundtrip", "edge", "unicode", "errors", "io"])
        outcome = "PASSED" if rng.random() > 0.05 else "FAILED"
        rows.append(f"tests/test_{module}.py::test_{kind}_{i:03d} {outcome}")
        i += 1
    rows += [
        "",
        "=================================== FAILURES ===================================",
        f"___________________ test_{module}_regression ___________________",
        "",
    ]
    rows += [f"    {line}" for line in lines[failed_at : failed_at + 40]]
    rows.append(f"E   AssertionError: {module} returned a different value")
    return _cut(rows, chars)


# ---------------------------------------------------------------------------
# Words: user requests and answers, each distinct


_ASKS = (
    "Look at {path}: where does it handle {name}?",
    "Next, check how {path} deals with {name}; I think the bug is near there.",
    "Can you find every use of {name} and tell me which one is wrong?",
    "Read {path} and tell me what {name} does before we change anything.",
    "The failing test mentions {name}. Investigate {path}.",
    "Let's move on to {path}. How does {name} relate to what we saw so far?",
)
_NEED_ASKS = (
    "Back to {path}, which you read earlier: what exactly does line {line} do?",
    "In {path} (you read it a few turns ago), quote the line that starts `{start}`.",
    "Before we go on: in {path}, what did the code right after `{start}` return?",
)


def _names(root: Path, rel: str) -> list[str]:
    return [q.split(":", 1)[1] for q, _ in _docstrings(root, rel) if ":" in q] or [Path(rel).stem]


_SAYS = (
    "The relevant part is {f}.",
    "{F} looks right to me; nothing to change there yet.",
    "Note {f}: it is what the caller relies on.",
    "I would keep {f} as it is and test around it.",
    "Next I would check how {f} is reached from the tests.",
    "{F} is where the error message is built.",
    "The behaviour we saw comes from {f}.",
    "{F} handles the edge case the user mentioned.",
)
DEF = re.compile(r"^\s*\d+\t\s*(?:def|class) (\w+)", re.MULTILINE)


def _facts(step: ToolStep) -> list[str]:
    """What an answer can say about a result: the names it defines, its size, a test."""
    out = [f"`{n}` in {step.arguments.get('path', 'the output')}" for n in DEF.findall(step.result)]
    lines = step.result.count("\n") + 1
    if step.name == "grep":
        out.append(f"the {lines} matches of {step.arguments['pattern']!r}")
    elif step.name == "run_tests":
        failed = [ln.split()[0] for ln in step.result.splitlines() if ln.endswith("FAILED")]
        out.append(f"the failing {failed[0]}" if failed else f"the {lines}-line test log")
    else:
        out.append(f"lines {step.arguments['offset']}-{step.arguments['offset'] + lines - 1}")
    return out


def _answer(rng: random.Random, words: int, opener: str, facts: list[str]) -> str:
    """~``words`` words from the turn's own facts, no sentence twice: distinct per turn."""
    parts = [opener]
    pairs = [(say, f) for say in _SAYS for f in dict.fromkeys(facts)]
    rng.shuffle(pairs)
    for say, f in pairs:
        if sum(len(p.split()) for p in parts) >= words:
            break
        parts.append(say.format(f=f, F=f[:1].upper() + f[1:]))
    return " ".join(parts)


def generate(params: ScriptParams, repo: Path | None = None) -> Session:
    """The session ``params`` describe: deterministic for a given seed and Python."""
    if params.published:
        return build_session(
            repo, turns=params.turns, file_chars=params.file_chars, seed=params.seed
        )
    root = repo or default_repo()
    rng = random.Random(params.seed)  # noqa: S311 - a reproducible script, not a secret
    files = _sources(root)
    system, tools = harness_head(root, params.head_tokens)
    lo, hi = params.result_tokens
    answer_words = int(params.answer_tokens * 0.72)  # ~1.4 tokens a word in such prose
    reads: list[tuple[int, ToolStep]] = []  # (turn, read_file step) available to need
    turns: list[Turn] = []
    for t in range(params.turns):
        rel = rng.choice(files)
        names = _names(root, rel)
        name = rng.choice(names)
        need: Need | None = None
        if t >= 2 and rng.random() < params.need_share:
            d = rng.randint(*params.need_distance)
            back = [(tt, s) for tt, s in reads if tt == t - d] or [
                (tt, s) for tt, s in reads if t - params.need_distance[1] <= tt < t
            ]
            if back:
                src_turn, src = rng.choice(back)
                need = Need(t, src_turn, src.call_id, src.arguments["path"], src.result)
        steps = []
        for k in range(rng.randint(*params.calls_per_turn)):
            chars = int(_size(rng, lo, hi) * CHARS_PER_TOKEN)
            roll = rng.random()
            cid = f"call_{t}_{k}"
            if roll < 0.6 or k == 0:
                path = rel if k == 0 else rng.choice(files)
                while _chars(root, path) < chars * 1.2:  # a file long enough for the size
                    path = rng.choice(files)
                offset = _offset(rng, root, path, chars)
                result = _read(root, path, offset, chars)
                step = ToolStep(
                    cid, "read_file", {"path": path, "offset": offset + 1, "limit": 2000}, result
                )
                reads.append((t, step))
            elif roll < 0.8:
                pool = rng.sample(files, len(files))
                # The name first; a broader pattern when it matches too little for the size.
                for word in (rng.choice(names), "self." + rng.choice(("get", "set", "_")), "if "):
                    found = _grep(root, pool, word, chars)
                    if len(found) >= chars * 0.8:
                        break
                step = ToolStep(cid, "grep", {"pattern": word, "path": "."}, found)
            else:
                step = ToolStep(
                    cid,
                    "run_tests",
                    {"args": ["-x", "-q", Path(rel).stem]},
                    _test_log(rng, root, rel, chars),
                )
            steps.append(step)
        if steps[0].arguments["path"] != rel:  # the first read moved to a longer file
            rel = steps[0].arguments["path"]
            name = rng.choice(_names(root, rel))
        if need is not None:
            first = need.content.splitlines()[0]
            line_no, _, start = first.strip().partition("\t")
            user = rng.choice(_NEED_ASKS).format(
                path=need.path, line=line_no, start=" ".join(start.split()[:6])
            )
            then = rng.choice(_ASKS).format(path=rel, name=name)
            user += " Then " + then[:1].lower() + then[1:]
        elif t == 0:
            user = (
                f"We need to fix a bug in how {rel} reports errors. Start by reading "
                f"it and find {name}."
            )
        else:
            user = rng.choice(_ASKS).format(path=rel, name=name)
        facts = [f"`{name}` in {rel}"]
        for st in steps:
            facts += _facts(st)
        did = rng.choice(("I read", "Checked", "Went through"))
        opener = f"{did} {rel} ({len(steps)} tool calls)."
        if need is not None:
            quoted = need.content.splitlines()[0].split("\t")[-1].strip()
            opener += f" In {need.path}, as read at turn {need.source_turn}: {quoted!r}."
        turns.append(
            Turn(
                index=t,
                user=user,
                steps=tuple(steps),
                answer=_answer(rng, answer_words, opener, facts),
                pin=CORRECTION if t == 1 else None,
                need=need,
            )
        )
    if params.shape == "claude-code":
        return Session(
            turns=turns,
            system=f"{CLAUDE_CODE_OPENING}\n{system}",
            tools=tools,
            environment=CLAUDE_CODE_ENVIRONMENT,
            attach_reads=True,
        )
    return Session(turns=turns, system=system, tools=tools)
