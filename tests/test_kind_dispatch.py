"""One home per server kind (issue 38): nothing outside ``backends/kinds/`` dispatches on
a server kind's name or on its client's class, and holds no table by kind; it asks the kind
(:class:`~sakur4.backends.kinds.base.ServerKind`) instead.

Read from the source (AST): a comparison of something named ``kind`` with a kind's
name (``kind == "vllm"``, ``r.kind != "llama.cpp"``, ``kind in ("ollama", …)``) and an
``isinstance`` against a class whose name ends in ``Client``, a dict keyed by kind
names.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sakur4.backends.kinds import KINDS

SRC = Path(__file__).resolve().parent.parent / "src" / "sakur4"
HOME = SRC / "backends" / "kinds"
# "unknown" is not among them: comparing with it asks whether any kind matched.
NAMES = frozenset(k.name for k in KINDS)
# None left: gateway/openai.py's llama.cpp test became ``ServerKind.lists_model_path``.
ALLOWED: set[tuple[str, str]] = set()


def _names_kind(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "kind") or (
        isinstance(node, ast.Attribute) and node.attr == "kind"
    )


def _kind_names(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_kind_names(e) for e in node.elts)
    return False


def _class_name(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [n for e in node.elts for n in _class_name(e)]
    if isinstance(node, ast.BinOp):  # A | B
        return _class_name(node.left) + _class_name(node.right)
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def dispatches(source: str) -> list[str]:
    """The kind dispatches in one module's source, as written."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_kind(s) for s in sides) and any(_kind_names(s) for s in sides):
                out.append(ast.unparse(node))
        elif isinstance(node, ast.Dict) and any(
            k is not None and _kind_names(k) for k in node.keys
        ):
            out.append(ast.unparse(node)[:60])  # a table by kind (REUSE_FLAG was one)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and any(n.endswith("Client") for n in _class_name(node.args[1]))
        ):
            out.append(ast.unparse(node))
    return out


def found(root: Path = SRC) -> list[tuple[str, str]]:
    out = []
    for f in sorted(root.rglob("*.py")):
        if HOME in f.parents:
            continue
        rel = f.relative_to(root).as_posix()
        out += [(rel, d) for d in dispatches(f.read_text(encoding="utf-8"))]
    return out


def test_no_kind_dispatch_outside_the_kinds() -> None:
    assert set(found()) <= ALLOWED, [f for f in found() if f not in ALLOWED]


def test_each_form_of_dispatch_is_found() -> None:
    source = (
        'if r.kind == "vllm": pass\n'
        'if kind != "llama.cpp": pass\n'
        'if x.kind in ("ollama", "sglang"): pass\n'
        "if isinstance(c, LlamaCppClient): pass\n"
        "if isinstance(c, (HttpBackend, m.VllmClient)): pass\n"
        'FLAG = {"vllm": "--enable-prompt-tokens-details"}\n'
        'if strategy.kind == "summarise": pass\n'  # not a server kind
        "if isinstance(c, HttpBackend): pass\n"  # not a kind's client
    )
    assert len(dispatches(source)) == 6
