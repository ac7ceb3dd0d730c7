"""One home per harness (issue 38): nothing outside ``harnesses/`` dispatches on a
harness's name, and holds no table by harness; it asks the registry
(:mod:`sakur4.harnesses`: each harness's :class:`~sakur4.harnesses.base.Harness`)
instead.

Read from the source (AST): a comparison with a harness's name in any of its forms (its
id ``claude-code``, the word ``wrap`` takes ``claude``, its display name ``Claude Code``,
its User-Agent product ``claude-cli``), a dict keyed by one, a ``return`` of one, and a
``Literal`` listing one. ``generic`` and ``openai`` are not among the names: they name
other things too (a request's shape, an API), and the generic harness is asked for by
``GENERIC``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import sakur4
from sakur4.harnesses import KNOWN
from sakur4.harnesses.base import GENERIC
from sakur4.settings import HarnessName

SRC = Path(sakur4.__file__).resolve().parent
NAMES = frozenset(
    n
    for h in KNOWN
    if h.name != GENERIC
    for n in (h.name, h.display, *h.agents, *((h.wrap.name,) if h.wrap else ()))
)
# Each with why it stays.
ALLOWED: set[tuple[str, str]] = {
    # The setting's choices: settings.py is the foundation and cannot ask the registry;
    # test_the_setting_names_only_known_harnesses holds it to the registry.
    ("settings.py", "Literal['auto', 'claude-code', 'opencode', 'aider', 'generic']"),
    # The demo's strategies and script shape named after the harness whose compaction or
    # messages they imitate (engine strategies run straight against the server): not a
    # harness the gateway serves.
    ("demo/compare.py", "strategy.kind == 'opencode'"),
    ("demo/compare.py", "strategy.kind == 'claude-code'"),
    ("demo/script.py", "Literal['tools', 'claude-code']"),
    ("demo/script.py", "self.shape == 'claude-code'"),
    ("demo/script.py", "params.shape == 'claude-code'"),
    ("demo/run.py", "a dict keyed by 'claude-code', 'opencode'"),
}


def _names_harness(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_harness(e) for e in node.elts)
    return False


def dispatches(source: str) -> list[str]:
    """The harness dispatches in one module's source, as written."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(_names_harness(s) for s in [node.left, *node.comparators]):
                out.append(ast.unparse(node))
        elif isinstance(node, ast.Dict) and (
            keys := sorted(
                repr(k.value) for k in node.keys if isinstance(k, ast.Constant) and k.value in NAMES
            )
        ):
            out.append(f"a dict keyed by {', '.join(keys)}")  # a table by harness (_AGENTS)
        elif isinstance(node, ast.Return) and node.value is not None:
            if _names_harness(node.value):
                out.append(ast.unparse(node))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Literal"
            and _names_harness(node.slice)
        ):
            out.append(ast.unparse(node))
    return out


def found(root: Path = SRC) -> list[tuple[str, str]]:
    out = []
    for f in sorted(root.rglob("*.py")):
        if root / "harnesses" in f.parents:  # their home
            continue
        rel = f.relative_to(root).as_posix()
        out += [(rel, d) for d in dispatches(f.read_text(encoding="utf-8"))]
    return out


def test_no_harness_dispatch_outside_the_harnesses() -> None:
    assert set(found()) <= ALLOWED, [f for f in found() if f not in ALLOWED]


def test_each_allowance_still_matches() -> None:
    # An allowance whose code has gone would excuse the next dispatch written there.
    assert set(found()) >= ALLOWED


def test_each_form_of_dispatch_is_found() -> None:
    source = (
        'if harness == "claude-code": pass\n'
        'if h.name in ("claude", "opencode"): pass\n'
        'AGENTS = {"claude-cli": "Claude Code"}\n'
        'def f(): return "aider"\n'
        'H = Literal["claude-code", "opencode"]\n'
        'if shape == "generic": pass\n'  # not a harness's name here
        'if api == "openai": pass\n'  # nor here
        'def g(): return "unknown"\n'
    )
    assert len(dispatches(source)) == 5


def test_the_setting_names_only_known_harnesses() -> None:
    # settings.py cannot ask the registry (it is the foundation); a harness it names must
    # exist, or SAKUR4_HARNESS would accept a shape nothing classifies.
    named = set(get_args(HarnessName)) - {"auto"}
    assert named <= {h.name for h in KNOWN}
    assert GENERIC in named
