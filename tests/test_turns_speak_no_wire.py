"""The turn pipeline speaks no wire (issue 38, item 4): it yields typed values
(:class:`~sakur4.backends.chat.ChatChunk` pieces of the answer, then the turn's
:class:`~sakur4.turns.turn.Outcome`), and each wire module of the gateway frames them.

So no module under ``src/sakur4/turns/`` holds a server-sent event's framing, in code,
comments or docstrings alike, and none imports the gateway (which would let it hand
framed lines up or call back into a wire module).
"""

from __future__ import annotations

import ast
from pathlib import Path

TURNS = Path(__file__).resolve().parent.parent / "src" / "sakur4" / "turns"

# An SSE data line, the OpenAI stream's end, an SSE event name (Anthropic's events).
FRAMING = ("data: ", "[DONE]", "event: ")


def framing_in(root: Path = TURNS) -> list[str]:
    """Every line under ``root`` that holds SSE framing, as ``file:line: text``."""
    found = []
    for f in sorted(root.rglob("*.py")):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if any(mark in line for mark in FRAMING):
                found.append(f"{f.relative_to(root.parent)}:{n}: {line.strip()}")
    return found


def gateway_imports(root: Path = TURNS) -> list[str]:
    """Every import of ``sakur4.gateway`` under ``root`` (a lazy one inside a function too)."""
    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name == "sakur4.gateway" or name.startswith("sakur4.gateway."):
                    found.append(f"{f.relative_to(root.parent)}:{node.lineno}: {name}")
    return found


def test_no_module_under_turns_frames_a_stream() -> None:
    assert framing_in() == []


def test_no_module_under_turns_imports_the_gateway() -> None:
    assert gateway_imports() == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    planted = tmp_path / "turns"
    planted.mkdir()
    (planted / "send.py").write_text(
        'from sakur4.gateway.translate import sse\nDONE = "data: [DONE]\\n\\n"\n',
        encoding="utf-8",
    )
    (planted / "watch.py").write_text("def f() -> None:\n    import sakur4.gateway\n")
    assert framing_in(planted) == ['turns/send.py:2: DONE = "data: [DONE]\\n\\n"']
    assert gateway_imports(planted) == [
        "turns/send.py:1: sakur4.gateway.translate",
        "turns/watch.py:2: sakur4.gateway",
    ]
